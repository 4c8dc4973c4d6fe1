"""``hookgate completion bash|zsh``: a shell completion script generated from the command tree itself.

No dependency: the argparse tree is walked once and written out as tables in a small bash function
(commands, verbs, options, and the choices an option takes). zsh loads the same function through its
``bashcompinit`` layer, so both shells complete exactly what ``--help`` shows.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

SHELLS = ("bash", "zsh")

_BASH = """\
# hookgate completion for {shell}: eval "$(hookgate completion {shell})", or save it where your shell loads
# completions from. Generated from `hookgate --help`; regenerate after an upgrade.
{prelude}_hookgate() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" path="" next i words=""
    (( COMP_CWORD > 0 )) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for (( i = 1; i < COMP_CWORD; i++ )); do
        next="$path ${{COMP_WORDS[i]}}"
        case "$next" in
{nodes}
        esac
    done
    case "$path|$prev" in
{choices}
    esac
    if [[ -z "$words" ]]; then
        case "$path" in
{words}
        esac
    fi
    COMPREPLY=( $(compgen -W "$words" -- "$cur") )
}}
complete -F _hookgate hookgate
"""

_ZSH_PRELUDE = ("(( $+functions[compdef] )) || { autoload -U +X compinit && compinit }\n"
                "autoload -U +X bashcompinit && bashcompinit\n")


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: dict[str, argparse.ArgumentParser] = action.choices
            return found
    return {}


def _walk(parser: argparse.ArgumentParser, path: str, out: dict[str, Any]) -> None:
    """Fill ``out["words"][path]`` (what may come next) and ``out["choices"][path|option]``."""
    words: list[str] = list(_subcommands(parser))
    for action in parser._actions:
        if action.option_strings:
            words.extend(o for o in action.option_strings if o.startswith("--"))
            if action.choices:
                for option in action.option_strings:
                    out["choices"][f"{path}|{option}"] = [str(c) for c in action.choices]
        elif action.choices and not isinstance(action, argparse._SubParsersAction):
            words.extend(str(c) for c in action.choices)
    out["words"][path] = words
    for name, child in _subcommands(parser).items():
        _walk(child, f"{path} {name}", out)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell`` (bash or zsh)."""
    tree: dict[str, Any] = {"words": {}, "choices": {}}
    _walk(parser, "", tree)
    nodes = [p for p in tree["words"] if p]
    return _BASH.format(
        shell=shell, prelude=_ZSH_PRELUDE if shell == "zsh" else "",
        nodes="\n".join(f"            {shlex.quote(p)}) path=\"$next\" ;;" for p in nodes),
        choices="\n".join(f"        {shlex.quote(k)}) words={shlex.quote(' '.join(v))} ;;"
                          for k, v in tree["choices"].items()),
        words="\n".join(f"            {shlex.quote(p)}) words={shlex.quote(' '.join(w))} ;;"
                        for p, w in tree["words"].items()),
    )


def add_command(sub: Any) -> None:
    """Add ``hookgate completion bash|zsh``."""
    text = "print a shell completion script (bash or zsh)"
    p = sub.add_parser("completion", help=text, description=text + '. Load it with: eval "$(hookgate completion '
                       'bash)" in ~/.bashrc, or the same with zsh in ~/.zshrc.')
    p.add_argument("shell", choices=SHELLS, help="the shell the script is for")
