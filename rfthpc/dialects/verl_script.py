"""Read a veRL launch script (`examples/grpo_trainer/run_*.sh`): the Hydra overrides of its
`python3 -m verl.trainer.main_ppo ...` command, for `rfthpc config import --from verl`.

The script is read, not run. What veRL's example scripts use is understood: comments, line
continuations, redirections, `NAME=value`, `export NAME=value` and arrays `NAME=(word ...)` (later
lines see them), `set -x`, single and double quotes, `$NAME`, `${NAME}`, `${NAME:-default}` /
`${NAME-default}` / `${NAME:=default}` / `${NAME:+word}`, `${NAME[@]}`, integer arithmetic `$((...))`, and `$@` or
`${@:N}` (where the import's own overrides go; a command without it gets them after its own). A
variable the script does not assign is read from the environment of the import and listed in the
imported config's header; one that is not set there either is an error, as are command substitutions
(`$(...)`, backquotes; but the script's own directory, `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`)
and positional parameters without a default. An `if ... elif ... else ... fi` whose tests compare
numbers and text the script sets (`[ $TP -eq 4 ]`, `[[ "$X" = y ]]`, `-z`, `-n`, `!`) is followed
branch by branch; other control flow (loops, tests of files or commands, of unset variables) is not
followed: a variable it sets that the veRL command reads is an error, any other is noted. Unquoted
expansions are split into words as the shell splits them. Other commands (`ulimit`, a data
download) are not part of the config: they are noted.
"""

from __future__ import annotations

import ast
import operator
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rfthpc.errors import ConfigError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
_ARRAY_START = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"python[0-9.]*")
_OPENERS = {"if", "for", "while", "until", "case", "select", "{"}
_CLOSERS = {"fi", "done", "esac", "}"}
_INSIDE = {"then", "elif", "else", "do"}
_SCRIPT_DIR = re.compile(r'\$\(\s*cd\s+"?\$\(\s*dirname\s+"?(\$0|\$\{?BASH_SOURCE(\[0\])?\}?)"?\s*\)"?\s*'
                         r'(&&|;)\s*pwd\s*\)')
"""The script's own directory, `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)` (or with `$0`)."""
_HYDRA_FLAGS = {"--config-path": "config_path", "-cp": "config_path", "--config-name": "config_name",
                "-cn": "config_name"}
_SEPARATORS = ("&&", "||", ";", "|", "&", "\n")
_Segment = tuple[str, bool, "list[str] | None"]
"""A piece of an expanded word: (text, whether the shell splits it into words, or the words a list
expansion such as `$@` or `${a[@]}` gives, each a word of its own)."""


@dataclass
class Launch:
    """The main command of a veRL launch script, its variables expanded."""

    overrides: list[str]
    """Its Hydra overrides (`key=value`, `+key=value`, `~key`), the import's own at `$@` or after them."""
    entry: str
    """What it runs: a module (`verl.trainer.main_ppo`) or a script path (`verl/trainer/main_ppo.py`)."""
    config_path: str | None = None
    """Its Hydra `--config-path`, if it gives one (relative to the entry's directory)."""
    config_name: str | None = None
    """Its Hydra `--config-name`, if it gives one."""
    from_environment: dict[str, str] = field(default_factory=dict)
    """Variables the script reads but does not assign, taken from the import's environment."""
    notes: list[str] = field(default_factory=list)
    """What the import leaves out of the script: its other commands, Hydra's own overrides."""


def read_script(path: Path | str, extra: list[str] | tuple[str, ...] = (),
                environ: Mapping[str, str] | None = None) -> Launch:
    """The veRL command the script at `path` runs, with `extra` overrides at its `$@` (or after its
    own overrides) and the environment `environ` (default: this process's). ConfigError listing every
    problem found if the script cannot be read that way."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"script {path}: cannot be read: {e}") from None
    shell = _Shell(dict(os.environ if environ is None else environ), list(extra), path.resolve().parent)
    launches: list[Launch] = []
    others: list[str] = []
    try:
        commands = _commands(text)
    except ValueError as e:
        raise ConfigError(f"script {path}: {e}") from None
    for raw in commands:
        words = shell.command(raw)
        if words is None:
            continue
        launch = _launch(words, shell)
        if launch is not None:
            if not shell.args_used:
                launch.overrides += extra  # the script drops them; the import's overrides still count
            launches.append(launch)
        elif words:
            others.append(" ".join(words))
    if not launches and not shell.problems:
        shell.problems.append("runs no veRL trainer (a `python3 -m verl.trainer.main_ppo ...` command, or another "
                              "`main_*` entry); give the veRL config and its overrides directly")
    if len(launches) > 1:
        shell.problems.append(f"runs {len(launches)} veRL trainers ({', '.join(x.entry for x in launches)}); import "
                              "one at a time: give its config and overrides directly")
    if shell.problems:
        listed = "\n".join(f"  - {p}" for p in dict.fromkeys(shell.problems))
        raise ConfigError(f"script {path}: cannot read its veRL command:\n{listed}")
    launch = launches[0]
    launch.from_environment = dict(sorted(shell.from_environment.items()))
    if others:
        launch.notes.append("the script's other commands are not part of the config: " + "; ".join(
            f"`{c}`" for c in others))
    if shell.conditional:
        launch.notes.append(f"the script's control flow ({', '.join(sorted(set(shell.conditional.values())))} "
                            f"blocks) is not followed: it sets {', '.join(sorted(shell.conditional))}, which the "
                            "veRL command does not read")
    return launch


def _launch(words: list[str], shell: _Shell) -> Launch | None:
    """The veRL launch in one command's words (`[env X=1] python3 -m MODULE overrides...`, possibly
    after `ray job submit ... --`), or None if the command runs no veRL entry point."""
    for i, word in enumerate(words):
        if not _PYTHON.fullmatch(Path(word).name):
            continue
        rest = words[i + 1:]
        while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c"):
            rest = rest[1:]  # the interpreter's own switches (`-u`, `-O`)
        if rest[:1] == ["-m"] and len(rest) > 1:
            entry, args = rest[1], rest[2:]
            last = entry.rsplit(".", 1)[-1]
        elif rest and rest[0].endswith(".py"):
            entry, args = rest[0], rest[1:]
            last = Path(entry).stem
        else:
            continue
        if last.startswith("main"):
            return _hydra_args(entry, args, shell)
    return None


def _hydra_args(entry: str, args: list[str], shell: _Shell) -> Launch:
    """Split a veRL entry point's arguments into Hydra's flags and the config overrides."""
    launch = Launch([], entry)
    hydra_own = []
    i = 0
    while i < len(args):
        arg = args[i]
        flag, eq, value = arg.partition("=")
        if flag in _HYDRA_FLAGS:
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            setattr(launch, _HYDRA_FLAGS[flag], value)
        elif arg in ("-m", "--multirun"):
            shell.problems.append(f"`{entry} {arg}` runs a Hydra sweep of several configs; import one run at a time")
        elif arg.startswith("-"):
            shell.problems.append(f"`{arg}`: a Hydra option the import does not read; remove it")
        elif arg.lstrip("+~").startswith("hydra."):
            hydra_own.append(arg)
        else:
            launch.overrides.append(arg)
        i += 1
    if hydra_own:
        launch.notes.append(f"{', '.join(hydra_own)}: Hydra's own settings (its output directory, logging), not "
                            "veRL's")
    return launch


def _commands(text: str) -> list[list[str]]:
    """The script's simple commands, each a list of words as written (quotes and `$` kept)."""
    commands: list[list[str]] = []
    words: list[str] = []
    word = ""
    i, n = 0, len(text)

    def end_word() -> None:
        nonlocal word
        if word:
            words.append(word)
            word = ""

    while i < n:
        c = text[i]
        if c == "\\" and i + 1 < n:
            if text[i + 1] != "\n":  # a backslash-newline continues the line
                word += text[i:i + 2]
            i += 2
        elif c in " \t\r":
            end_word()
            i += 1
        elif c == "#" and not word:
            while i < n and text[i] != "\n":
                i += 1
        elif c in "<>" or text.startswith("&>", i):
            if word.isdigit():  # the file descriptor of `2>&1`
                word = ""
            end_word()
            i = _redirection_end(text, i)
        elif text.startswith(_SEPARATORS, i):
            end_word()
            if words:
                commands.append(words)
            words = []
            i += 2 if text.startswith(("&&", "||"), i) else 1
        elif c in "'\"`":
            end = _closing(text, i)
            word += text[i:end]
            i = end
        elif c == "$" and i + 1 < n and text[i + 1] in "({":
            end = _balanced(text, i + 1)
            word += text[i:end]
            i = end
        elif c == "(" and _ARRAY_START.fullmatch(word):
            end = _balanced(text, i, comments=True)
            word += text[i:end]
            i = end
        else:
            word += c
            i += 1
    end_word()
    if words:
        commands.append(words)
    return commands


def _redirection_end(text: str, start: int) -> int:
    """The index after a redirection (`> log`, `2>&1`, `&>> log`, `< in`) starting at `start`: output
    the import does not need."""
    i = start
    while i < len(text) and text[i] in "<>&":
        i += 1
    if text[i - 1] == "&" and i < len(text) and (text[i].isdigit() or text[i] == "-"):
        return i + 1  # `>&1`: to another descriptor
    while i < len(text) and text[i] in " \t":
        i += 1
    while i < len(text) and text[i] not in " \t\n;|&":
        i = _closing(text, i) if text[i] in "'\"" else i + 1
    return i


def _closing(text: str, start: int) -> int:
    """The index after the quote that closes the one at `start`."""
    quote = text[start]
    i = start + 1
    while i < len(text):
        if text[i] == "\\" and quote != "'":
            i += 2
            continue
        if quote == '"' and text[i] == "$" and i + 1 < len(text) and text[i + 1] in "({":
            i = _balanced(text, i + 1)
            continue
        if text[i] == quote:
            return i + 1
        i += 1
    line = text.count("\n", 0, start) + 1
    raise ValueError(f"line {line}: the quote {quote} is never closed")


def _balanced(text: str, start: int, comments: bool = False) -> int:
    """The index after the bracket that closes the `(` or `{` at `start` (quotes inside skipped, and
    with `comments` the comments of an array's lines)."""
    pairs = {"(": ")", "{": "}"}
    depth, i = 0, start
    opening = text[start]
    while i < len(text):
        c = text[i]
        if c in "'\"" and i > start:
            i = _closing(text, i)
            continue
        if comments and c == "#" and text[i - 1] in " \t\n(":
            newline = text.find("\n", i)
            i = len(text) if newline < 0 else newline
            continue
        if c == opening:
            depth += 1
        elif c == pairs[opening]:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    line = text.count("\n", 0, start) + 1
    raise ValueError(f"line {line}: `${opening}` is never closed")


@dataclass
class _Block:
    """A control-flow block (`if`, `for`, ...) the current command is in."""

    keyword: str
    taken: bool | None
    """Whether the commands of its current branch run; None: the import cannot tell (a loop, or an `if`
    whose test it cannot evaluate), so the block is not followed."""
    done: bool = False
    """An `if` branch has run already: the `elif` / `else` branches after it do not."""


@dataclass
class _Shell:
    """The variables as the script's commands set them, and what reading it found wrong."""

    environ: dict[str, str]
    extra: list[str]
    script_dir: Path
    """The directory of the script (its `$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)`)."""
    variables: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    from_environment: dict[str, str] = field(default_factory=dict)
    blocks: list[_Block] = field(default_factory=list)
    conditional: dict[str, str] = field(default_factory=dict)
    """Variables assigned only inside a block the import does not follow, and the block's keyword."""
    args_used: bool = False
    """Whether the last command expanded `$@`."""
    problems: list[str] = field(default_factory=list)

    def command(self, raw: list[str]) -> list[str] | None:
        """Carry out one command's assignments; its words expanded, or None if it was only assignments,
        a shell built-in the import follows (`export`, `set`, `unset`, `shift`) or inside a block."""
        self.args_used = False
        if raw[0] in _OPENERS:
            running = self._running()
            if running is False:
                taken: bool | None = False  # inside a branch not taken
            else:
                taken = self._test(raw[1:]) if raw[0] == "if" and running else None
            self.blocks.append(_Block(raw[0], taken, done=bool(taken)))
            return None
        if raw[0] in _CLOSERS:
            if self.blocks:
                self.blocks.pop()
            return None
        if raw[0] in _INSIDE:
            self._branch(raw)
            raw = raw[1:] if raw[0] != "elif" else []
            if not raw:
                return None
        running = self._running()
        if running is False:
            return None  # a branch the script does not take
        if running is None:
            keyword = next(b.keyword for b in self.blocks if b.taken is None)
            for name in (m.group(1) for m in map(_ASSIGNMENT.fullmatch, raw) if m):
                self.conditional.setdefault(name, keyword)
            if any(_PYTHON.fullmatch(Path(w).name) for w in raw):
                self.problems.append(f"the veRL command is inside the script's `{keyword}` block, which the "
                                     "import does not follow; give the config and its overrides directly")
            return None
        i = 0
        while i < len(raw) and _ASSIGNMENT.fullmatch(raw[i]):
            i += 1
        assignments, rest = raw[:i], raw[i:]
        if not rest or rest[0] in ("export", "declare", "readonly"):
            for word in assignments + rest[1:]:
                match = _ASSIGNMENT.fullmatch(word)
                if match:
                    self._assign(match.group(1), match.group(2))
                elif not word.startswith("-") and not _NAME.fullmatch(word):
                    self.problems.append(f"`{rest[0]} {word}`: not a variable the import can follow")
            return None
        if rest[0] in ("set", "shift"):
            return None
        if rest[0] == "unset":
            for name in rest[1:]:
                self.variables.pop(name, None)
                self.arrays.pop(name, None)
            return None
        words: list[str] = []
        for word in rest:
            words += self.expand(word)
        return words

    def _running(self) -> bool | None:
        """Whether the current command runs: False inside a branch not taken, None inside a block the
        import does not follow."""
        if any(b.taken is False for b in self.blocks):
            return False
        return None if any(b.taken is None for b in self.blocks) else True

    def _branch(self, raw: list[str]) -> None:
        """`then`, `do`, `elif TEST`, `else`: the branch of the innermost `if` that now starts."""
        block = self.blocks[-1] if self.blocks else None
        if block is None or block.keyword != "if" or raw[0] not in ("elif", "else") or block.taken is None:
            return
        if block.done:
            block.taken = False
        elif raw[0] == "else":
            block.taken = True
        else:
            block.taken = self._test(raw[1:]) if self._outer_running() else False
            block.done = bool(block.taken)

    def _outer_running(self) -> bool:
        return all(b.taken for b in self.blocks[:-1])

    def _test(self, raw: list[str]) -> bool | None:
        """The outcome of an `if`'s test (`[ ... ]`, `[[ ... ]]`, `test ...`, with `!`) on numbers and
        text the script sets; None if the import cannot evaluate it (a command, an unset variable)."""
        before, environment = len(self.problems), dict(self.from_environment)
        words: list[str] = []
        for word in raw:
            words += self.expand(word)
        if len(self.problems) > before:  # a variable it cannot read: the block is not followed
            del self.problems[before:]
            self.from_environment = environment
            return None
        negate = words[:1] == ["!"]
        words = words[1:] if negate else words
        if words[:1] == ["test"]:
            words = words[1:]
        elif words[:1] in (["["], ["[["]) and words[-1:] in (["]"], ["]]"]):
            words = words[1:-1]
        else:
            return None
        outcome = _evaluate(words)
        return None if outcome is None else outcome != negate

    def _assign(self, name: str, raw: str) -> None:
        """`name=raw`: a value, or an array `name=(word ...)` whose words are expanded one by one."""
        if raw.startswith("(") and raw.endswith(")"):
            self.arrays[name] = [word for command in _commands(raw[1:-1]) for raw_word in command
                                 for word in self.expand(raw_word)]
            self.variables.pop(name, None)
        else:
            self.variables[name] = self.expand(raw, split=False)[0]
            self.arrays.pop(name, None)

    def expand(self, raw: str, split: bool = True) -> list[str]:
        """The words `raw` expands to (one word if not `split`, as an assignment's value)."""
        segments: list[_Segment] = []
        self._expand_into(raw, segments, quoted=False)
        if not split:
            return ["".join(" ".join(listed) if listed is not None else text for text, _, listed in segments)]
        words: list[str] = []
        current: str | None = None
        for text, splittable, listed in segments:
            if listed is not None:
                # "pre${a[@]}post": pre joins the first word, post the last, as in the shell.
                if listed:
                    current = (current or "") + listed[0]
                    if len(listed) > 1:
                        words += [current, *listed[1:-1]]
                        current = listed[-1]
                continue
            if not splittable:
                current = (current or "") + text
                continue
            for piece in re.split(r"(\s+)", text):
                if piece.isspace():
                    if current is not None:
                        words.append(current)
                    current = None
                elif piece:
                    current = (current or "") + piece
        if current is not None:
            words.append(current)
        return words

    def _expand_into(self, raw: str, out: list[_Segment], quoted: bool) -> None:
        """Append the segments of `raw` to `out`; `quoted`: inside double quotes."""
        i, n = 0, len(raw)
        while i < n:
            c = raw[i]
            if c == "'" and not quoted:
                end = _closing(raw, i)
                out.append((raw[i + 1:end - 1], False, None))
                i = end
            elif c == '"' and not quoted:
                end = _closing(raw, i)
                inner: list[_Segment] = []
                self._expand_into(raw[i + 1:end - 1], inner, quoted=True)
                if any(listed is not None for _, _, listed in inner):
                    out += inner  # "$@", "${a[@]}": a word per element
                else:
                    out.append(("".join(text for text, _, _ in inner), False, None))
                i = end
            elif c == "\\" and i + 1 < n and (not quoted or raw[i + 1] in '$`"\\'):
                out.append((raw[i + 1], False, None))
                i += 2
            elif c == "`":
                end = _closing(raw, i)
                self.problems.append(f"{raw[i:end]}: a command substitution, which the import does not run; write "
                                     "its value in the script")
                i = end
            elif c == "$" and i + 1 < n:
                segment, i = self._dollar(raw, i, quoted)
                out.append(segment)
            else:
                out.append((c, False, None))
                i += 1

    def _dollar(self, raw: str, i: int, quoted: bool) -> tuple[_Segment, int]:
        """The expansion starting with the `$` at `i`, and the index after it."""
        rest = raw[i + 1:]
        if rest.startswith("(("):
            end = _balanced(raw, i + 1)
            return (self._arithmetic(raw[i + 3:end - 2]), False, None), end
        if rest.startswith("("):
            end = _balanced(raw, i + 1)
            if _SCRIPT_DIR.fullmatch(raw[i:end]):
                return (str(self.script_dir), not quoted, None), end
            self.problems.append(f"{raw[i:end]}: a command substitution, which the import does not run; write its "
                                 "value in the script")
            return ("", False, None), end
        if rest[0] in "@*":
            self.args_used = True
            return ("", False, list(self.extra)), i + 2
        if rest.startswith("{"):
            end = _balanced(raw, i + 1)
            body = raw[i + 2:end - 1]
            if re.fullmatch(r"[@*]:[0-9]+", body):  # "${@:2}": the arguments after the script's own
                self.args_used = True
                return ("", False, list(self.extra)), end
            array = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([@*])\]", body)
            if array:
                elements = self._array(array.group(1), f"${{{body}}}")
                return ("", False, elements if quoted else [w for e in elements for w in e.split()]), end
            return (self._parameter(body), not quoted, None), end
        if rest[0].isdigit():
            return (self._value(rest[0], f"${rest[0]}"), not quoted, None), i + 2
        match = _NAME.match(rest)
        if match is None:
            return ("$", False, None), i + 1
        return (self._value(match.group(0), f"${match.group(0)}"), not quoted, None), i + 1 + match.end()

    def _array(self, name: str, written: str) -> list[str]:
        if name in self.arrays:
            return self.arrays[name]
        value = self._value(name, written)
        return [value] if value else []

    def _parameter(self, body: str) -> str:
        """`${body}`: a name, an array element, or a name with a default (`:-`, `-`, `:=`) or an
        alternative (`:+`, `+`)."""
        element = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)\[([0-9]+)\]", body)
        if element:
            elements = self._array(element.group(1), f"${{{body}}}")
            index = int(element.group(2))
            return elements[index] if index < len(elements) else ""
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?:(:?[-=+])(.*))?", body, re.DOTALL)
        if match is None:
            self.problems.append(f"${{{body}}}: a parameter expansion the import does not follow; write the value")
            return ""
        name, op, default = match.groups()
        if op is None:
            return self._value(name, f"${{{body}}}")
        given = self._lookup(name)
        is_set = given is not None and (given != "" or not op.startswith(":"))
        if op.endswith("+"):  # the word if set, else nothing
            return self.expand(default, split=False)[0] if is_set else ""
        if is_set:
            return given
        value = self.expand(default, split=False)[0]
        if op.endswith("=") and not name.isdigit():
            self.variables[name] = value
        return value

    def _lookup(self, name: str) -> str | None:
        """A variable's value: the script's, else the environment's (recorded); None if unset. Positional
        parameters are never set (the import's overrides are `$@`, not `$1`...); a variable assigned only
        in a block the import does not follow is a problem."""
        if name.isdigit():
            return None
        if name in self.variables:
            return self.variables[name]
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        if name in self.conditional:
            self.problems.append(f"${name}: set only inside the script's `{self.conditional[name]}` block, which the "
                                 f"import does not follow; set {name} before the veRL command, or give the "
                                 "override directly")
            return ""
        if name in self.environ:
            self.from_environment[name] = self.environ[name]
            return self.environ[name]
        return None

    def _value(self, name: str, written: str) -> str:
        """A variable's value (`_lookup`); a problem naming it, and "", if it has none."""
        value = self._lookup(name)
        if value is not None:
            return value
        if name.isdigit():
            self.problems.append(f"{written}: the script's argument {name}, which the import does not pass; write "
                                 f"the value in the script, or give it a default (${{{name}:-value}})")
        else:
            self.problems.append(f"{written}: {name} is neither set by the script nor in the environment; export "
                                 f"it (export {name}=...) or set it in the script")
        return ""

    def _arithmetic(self, expression: str) -> str:
        """`$((expression))`: integer arithmetic on numbers and variables, as the shell computes it."""
        try:
            tree = ast.parse(re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", r"\1", expression).strip(), mode="eval")
            return str(self._integer(tree.body))
        except (SyntaxError, ValueError, ZeroDivisionError) as e:
            self.problems.append(f"$(({expression})): not integer arithmetic the import can compute ({e})")
            return ""

    def _integer(self, node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            value = self._lookup(node.id)
            if value is None:
                raise ValueError(f"{node.id} is not set")
            return int(value.strip() or 0)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            value = self._integer(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](self._integer(node.left), self._integer(node.right))
        raise ValueError(f"{ast.unparse(node)!r} is not integer arithmetic")


_COMPARISONS: dict[str, Callable[[int, int], bool]] = {
    "-eq": operator.eq, "-ne": operator.ne, "-lt": operator.lt, "-le": operator.le, "-gt": operator.gt,
    "-ge": operator.ge,
}


def _evaluate(words: list[str]) -> bool | None:
    """A test's expression (`A -eq B`, `A = B`, `A != B`, `-z A`, `-n A`, `A`); None if it is another."""
    if len(words) == 1:
        return words[0] != ""
    if len(words) == 2 and words[0] in ("-z", "-n"):
        return (words[1] == "") == (words[0] == "-z")
    if len(words) == 3 and words[1] in ("=", "==", "!="):
        return (words[0] == words[2]) == (words[1] != "!=")
    if len(words) == 3 and words[1] in _COMPARISONS:
        try:
            return _COMPARISONS[words[1]](int(words[0]), int(words[2]))
        except ValueError:
            return None
    return None


def _shell_division(a: int, b: int) -> int:
    """The shell's `/`: integer division that rounds towards zero."""
    quotient = abs(a) // abs(b)
    return quotient if (a >= 0) == (b >= 0) else -quotient


_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: _shell_division,
    ast.FloorDiv: _shell_division, ast.Mod: lambda a, b: a - b * _shell_division(a, b),
}
