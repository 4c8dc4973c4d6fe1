"""``hookgate completion bash|zsh``: a shell completion script generated from the command tree itself.

No dependency: the argparse tree is walked once and written out as tables (commands, verbs, options with
their help, the choices an option takes, the options that take a value). bash gets a ``complete -F``
function; zsh a native ``#compdef hookgate`` function offering the same words with their descriptions
through ``_describe`` (no ``bashcompinit``). Both complete exactly what ``--help`` shows.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

SHELLS = ("bash", "zsh")

_BASH = """\
# hookgate completion for bash: eval "$(hookgate completion bash)", or save it where bash loads completions
# from. Generated from `hookgate --help`; regenerate after an upgrade.
_hookgate() {{
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

_ZSH = """\
#compdef hookgate
# hookgate completion for zsh: save it as _hookgate in a directory of $fpath (before compinit runs), or
# eval "$(hookgate completion zsh)" in ~/.zshrc. Generated from `hookgate --help`; regenerate after an upgrade.

_hookgate() {{
    local node="" next i prev="${{words[CURRENT-1]}}"
    local -a described
    for (( i = 2; i < CURRENT; i++ )); do
        next="$node ${{words[i]}}"
        case "$next" in
{nodes}
        esac
    done
    case "$node|$prev" in
{choices}
{values}
    esac
    case "$node" in
{words}
    esac
    _describe -t hookgate "hookgate${{node}}" described
}}

if [[ $funcstack[1] == _hookgate ]]; then
    _hookgate "$@"  # autoloaded from $fpath by compinit: this file is the function's body, run it now
else
    (( $+functions[compdef] )) || {{ autoload -U +X compinit && compinit }}
    compdef _hookgate hookgate
fi
"""


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found: dict[str, argparse.ArgumentParser] = action.choices
            return found
    return {}


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An action's help on one line (``%(default)s`` expanded), or empty."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    try:
        text = parser._get_formatter()._expand_help(action)
    except (KeyError, TypeError, ValueError):
        text = action.help
    return " ".join(text.split())


def _walk(parser: argparse.ArgumentParser, path: str, out: dict[str, Any]) -> None:
    """Fill the tables of the command tree below ``path``.

    ``out["words"][path]``: what may come next; ``out["help"][path][word]``: its help; by ``path|option``,
    ``out["choices"]``: the choices an option takes, ``out["values"]``: the options that take a free value.
    """
    words: list[str] = list(_subcommands(parser))
    helps: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps |= {a.dest: _help(parser, a) for a in action._choices_actions}
        elif action.help == argparse.SUPPRESS:
            continue  # hidden from --help (an internal option): not offered either
        elif action.option_strings:
            longs = [o for o in action.option_strings if o.startswith("--")]
            words.extend(longs)
            helps |= {o: _help(parser, action) for o in longs}
            for option in action.option_strings:
                if action.choices:
                    out["choices"][f"{path}|{option}"] = [str(c) for c in action.choices]
                elif action.nargs != 0:
                    out["values"].append(f"{path}|{option}")
        elif action.choices:
            words.extend(str(c) for c in action.choices)
            helps |= {str(c): _help(parser, action) for c in action.choices}
    out["words"][path] = words
    out["help"][path] = helps
    for name, child in _subcommands(parser).items():
        _walk(child, f"{path} {name}", out)


def _tree(parser: argparse.ArgumentParser) -> dict[str, Any]:
    tree: dict[str, Any] = {"words": {}, "help": {}, "choices": {}, "values": []}
    _walk(parser, "", tree)
    return tree


def _described(word: str, help_text: str) -> str:
    """One ``_describe`` entry, ``word:help``, quoted for zsh (a colon in the word is escaped)."""
    entry = word.replace(":", "\\:") + (f":{help_text}" if help_text else "")
    return shlex.quote(entry)


def _entries(words: list[str], helps: dict[str, str]) -> str:
    return " ".join(_described(w, helps.get(w, "")) for w in words)


def _zsh(tree: dict[str, Any]) -> str:
    """The native zsh completion function (``_describe`` with each word's help)."""
    nodes = [p for p in tree["words"] if p]
    return _ZSH.format(
        nodes="\n".join(f"            {shlex.quote(p)}) node=\"$next\" ;;" for p in nodes),
        choices="\n".join(f"        {shlex.quote(k)}) compadd -- {' '.join(shlex.quote(c) for c in v)}; return ;;"
                          for k, v in tree["choices"].items()),
        values="\n".join(f"        {shlex.quote(k)}) _message -e values 'value'; return ;;"
                         for k in tree["values"]),
        words="\n".join(f"        {shlex.quote(p)}) described=({_entries(ws, tree['help'][p])}) ;;"
                        for p, ws in tree["words"].items()),
    )


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell`` (bash or zsh)."""
    tree = _tree(parser)
    if shell == "zsh":
        return _zsh(tree)
    nodes = [p for p in tree["words"] if p]
    return _BASH.format(
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
