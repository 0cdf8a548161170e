"""cli wing: the `arithsweep` command line (Typer), on top of the other three; nothing imports it.

    app           the Typer app: the one list of commands, the one error policy
    common        what every command module shares: consoles, help texts, JSON output,
                  the early check of every path a command writes
    run_cmds      train, finish, ask, params, bench
    search_cmds   search, spaces, ui
    board_cmds    verify, leaderboard, show, export, publish
    inspect_cmds  inspect
    ood_cmds      ood
    render        Rich renderables: leaderboard rows, reports, a running search
    serve         the UI servers of `arithsweep ui`, and stopping all of them

Command modules import common, never app. torch, ray and mlflow are imported inside the
commands that need them, so `arithsweep --help` and `arithsweep leaderboard` start fast.
"""
