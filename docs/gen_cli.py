"""MkDocs hook: the CLI reference page, and the repository files the docs link to.

`mkdocs.yml` names this file under `hooks:`. At build time it

- writes the page `cli.md` from the Typer app itself (`cli_markdown()`): every command with its
  help, usage, arguments and options, each option with the names, help and default that
  `arithsweep COMMAND --help` prints, so the page cannot drift from `--help`;
- serves the repository files a page links to outside `docs/` (`../leaderboard/LEADERBOARD.md`,
  `../leaderboard/pictures/*.png`): a link that works on GitHub works on the site too. The
  file is carried into the site at its repository path and the link rewritten to it; a link
  to a repository folder keeps its text only (a static site cannot list a folder); a link to
  nothing is a warning, so `mkdocs build --strict` fails on it. A carried page's own links
  back into docs/ (a study's README under studies/ citing docs/results.md) are rewritten to
  the pages' places in the site.

Importing the app loads no torch (the commands import it when they run). `python
docs/gen_cli.py` prints the CLI page.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = Path(__file__).resolve().parent
CLI_PAGE = "cli.md"
PROG = "arithsweep"

log = logging.getLogger("mkdocs.hooks.gen_cli")

_TRAILER = re.compile(r"\s*\[([^\[\]]*)\]\s*$")  # click's "  [default: 20; required]"


# ---------------------------------------------------------------- the CLI reference page


def _app():
    try:
        from arithsweep.cli.app import app
    except ImportError:  # the repository is not installed: import it from the checkout
        sys.path.insert(0, str(REPO))
        from arithsweep.cli.app import app
    return app


def _text(s: str) -> str:
    """Help text as markdown: code spans kept, everything else literal (`<N>`, `|`, `*`)."""
    parts = re.split(r"(`[^`]*`)", s)
    out = []
    for i, part in enumerate(parts):
        if i % 2:  # a code span
            out.append(part)
            continue
        part = part.replace("\\", "\\\\").replace("&", "&amp;")
        part = part.replace("<", "&lt;").replace(">", "&gt;")
        for ch in "|*_[]":
            part = part.replace(ch, "\\" + ch)
        out.append(part)
    return "".join(out)


def _code(s: str) -> str:
    return f"`` {s} ``" if "`" in s else f"`{s}`"


def _split_help(text: str) -> tuple[str, str, bool]:
    """(help, default, required) out of a click help record's second half."""
    default, required = "", False
    m = _TRAILER.search(text)
    if m and any(x.strip().startswith(("default:", "required")) for x in m.group(1).split(";")):
        text = text[: m.start()]
        for item in (x.strip() for x in m.group(1).split(";")):
            if item.startswith("default:"):
                default = item[len("default:"):].strip()
            elif item == "required":
                required = True
    return text.strip(), default, required


def _paragraphs(help_text: str) -> str:
    text = (help_text or "").split("\f")[0]
    paras = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
    return "\n\n".join(_text(p.replace("\b", "").strip()) for p in paras)


def iter_commands(group, ctx, path=()):
    """(path, command, context) for every visible command under a click group, depth first."""
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or getattr(cmd, "hidden", False):
            continue
        sub = cmd.context_class(cmd, info_name=name, parent=ctx)
        yield (*path, name), cmd, sub
        if hasattr(cmd, "list_commands"):
            yield from iter_commands(cmd, sub, (*path, name))


def _params_table(rows: list[tuple[str, str, str]], head: str) -> list[str]:
    lines = [f"| {head} | help | default |", "|---|---|---|"]
    for names, help_text, default in rows:
        lines.append(f"| {names} | {help_text} | {default} |")
    return lines


def command_markdown(path: tuple[str, ...], cmd, ctx) -> str:
    full = " ".join((PROG, *path))
    lines = [f"## `{full}` {{#{'-'.join(path)}}}", ""]
    if getattr(cmd, "deprecated", False):
        lines += ["*Deprecated.*", ""]
    if cmd.help:
        lines += [_paragraphs(cmd.help), ""]
    lines += ["```text", cmd.get_usage(ctx), "```", ""]
    args, opts = [], []
    for param in cmd.get_params(ctx):
        if getattr(param, "hidden", False):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            if param.param_type_name != "argument":
                continue
            record = (param.human_readable_name, "")
        names, help_text = record
        help_text, default, required = _split_help(help_text)
        help_md = _text(help_text) or ""
        if required:
            help_md = (help_md + " (required)").strip()
        row = (_code(names), help_md, _code(default) if default else "")
        (args if param.param_type_name == "argument" else opts).append(row)
    if args:
        lines += ["**Arguments**", "", *_params_table(args, "argument"), ""]
    if opts:
        lines += ["**Options**", "", *_params_table(opts, "option"), ""]
    if hasattr(cmd, "list_commands"):
        subs = [n for n in cmd.list_commands(ctx) if not getattr(cmd.get_command(ctx, n),
                                                                 "hidden", False)]
        lines += ["**Commands:** " + ", ".join(f"`{n}`" for n in subs), ""]
    return "\n".join(lines)


def cli_markdown(app=None) -> str:
    """The CLI reference page, from the Typer app's command tree (what `--help` prints)."""
    import typer

    root = typer.main.get_command(app if app is not None else _app())
    ctx = root.context_class(root, info_name=PROG)
    commands = list(iter_commands(root, ctx))
    out = [
        "# CLI reference",
        "",
        "<!-- Generated from the Typer app by docs/gen_cli.py at build time; do not edit. -->",
        "",
        _paragraphs(root.help or ""),
        "",
        f"This page is generated from the command line itself when the site is built, so it "
        f"says what `{PROG} COMMAND --help` says. Every user mistake ends in one `error: …` "
        f"line on stderr and exit code 2.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    for path, cmd, _ in commands:
        summary = _text(cmd.get_short_help_str(limit=300))
        out.append(f"| [`{' '.join(path)}`](#{'-'.join(path)}) | {summary} |")
    out.append("")
    for path, cmd, sub in commands:
        out += [command_markdown(path, cmd, sub), ""]
    return "\n".join(out).rstrip() + "\n"


# ---------------------------------------------------------------- links that leave docs/

_FENCE = re.compile(r"^\s*(```|~~~)")
_LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(([^()\s]+)((?:\s+\"[^\"]*\")?)\)")


def _outside_links(markdown: str, page_path: Path, into_docs: bool = False):
    """(match, repository path) of every relative link that leaves docs/, outside code fences;
    with `into_docs`, of every one that points into docs/ instead (a carried page's links to
    the manual: a study's README beside its data links back to the page that cites it)."""
    fenced = False
    offset = 0
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            for m in _LINK.finditer(line):
                target = m.group(3).split("#")[0].split("?")[0]
                if not target or re.match(r"^[a-zA-Z][\w+.-]*:|^/|^#", m.group(3)):
                    continue
                real = Path(os.path.normpath(page_path.parent / target))
                if real.is_relative_to(DOCS) == into_docs:
                    yield offset, m, real
        offset += len(line)


def _carry(files, config, real: Path):
    """Add a repository file to the site at its repository path; return its File (or None)."""
    from mkdocs.structure.files import File

    src_uri = real.relative_to(REPO).as_posix()
    found = files.get_file_from_path(src_uri)
    if found is None:
        found = File(src_uri, str(REPO), config["site_dir"], config["use_directory_urls"])
        files.append(found)
    return found


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, CLI_PAGE, content=cli_markdown()))
    todo = [Path(f.abs_src_path) for f in files.documentation_pages() if f.abs_src_path]
    seen = set(todo)
    while todo:
        page = todo.pop()
        for _, _, real in _outside_links(page.read_text(encoding="utf-8"), page):
            if real.is_file() and real.is_relative_to(REPO) and real not in seen:
                seen.add(real)
                _carry(files, config, real)
                if real.suffix == ".md":
                    todo.append(real)
    return files


def on_page_markdown(markdown, page, config, files):
    if not page.file.abs_src_path:  # generated (this CLI page)
        return markdown
    here = Path(page.file.abs_src_path)
    out, last = [], 0
    for offset, m, real in _outside_links(markdown, here):
        start, end = offset + m.start(), offset + m.end()
        out.append(markdown[last:start])
        last = end
        if not real.is_relative_to(REPO) or not real.exists():
            log.warning("%s: the link %r points to nothing in the repository",
                        page.file.src_uri, m.group(3))
            out.append(m.group(0))
        elif real.is_dir():  # a folder: GitHub lists it, a static site cannot; keep the words
            out.append(m.group(2))
        else:
            dest = _carry(files, config, real).src_uri
            rel = os.path.relpath(dest, os.path.dirname(page.file.src_uri) or ".")
            frag = m.group(3)[len(m.group(3).split("#")[0]):]
            out.append(f"{m.group(1)}[{m.group(2)}]({Path(rel).as_posix()}{frag}{m.group(4)})")
    out.append(markdown[last:])
    if not here.is_relative_to(DOCS):  # a carried page: its links into docs/ go to the pages
        return _to_docs("".join(out), here, page)
    return "".join(out)


def _to_docs(markdown: str, here: Path, page) -> str:
    """A carried page's links into docs/ (`../../docs/results.md#x` from a study's README),
    rewritten to where those pages lie in the site; the links to other repository files are
    on_page_markdown's."""
    out, last = [], 0
    for offset, m, real in _outside_links(markdown, here, into_docs=True):
        out.append(markdown[last:offset + m.start()])
        last = offset + m.end()
        rel = os.path.relpath(real.relative_to(DOCS).as_posix(),
                              os.path.dirname(page.file.src_uri) or ".")
        frag = m.group(3)[len(m.group(3).split("#")[0]):]
        out.append(f"{m.group(1)}[{m.group(2)}]({Path(rel).as_posix()}{frag}{m.group(4)})")
    out.append(markdown[last:])
    return "".join(out)


if __name__ == "__main__":
    sys.stdout.write(cli_markdown())
