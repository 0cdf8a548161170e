"""leaderboard wing: verify checkpoints from their weights alone, keep the board, publish it.

Imports core only. By job:

    verifying     verify (suite "v2": a checkpoint's claims re-derived from its weights),
                  report (one verification's result and the statistics it is scored with)
    the database  board (`Leaderboard`, open_db), schema (the ORM), db (URLs, engines, SQLite
                  setup, errors), migrations (ordered schema migrations)
    finding       entry_lookup (an entry by id, sha256 prefix or published folder),
                  provenance (where a found entry came from: its search, its command)
    publishing    publish (LEADERBOARD.md and the checkpoints it lists), publish_dir (the
                  folder it writes: layout, what it may overwrite, the staged swap), published
                  (entries.json as data), projects (LEADERBOARD.md's per-project sections),
                  tables (rows as JSON, CSV, markdown; torch-free for `arithsweep leaderboard`)
    exporting     adderboard (an AdderBoard submission file), adderboard_check (AdderBoard's
                  own protocol on it), transformer_lens_export (a TransformerLens model)
"""
