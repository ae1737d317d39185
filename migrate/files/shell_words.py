"""A small POSIX-shell reader for launchers: the words of each simple command with their offsets, and
every ``$NAME`` expansion that the shell would perform. Enough of the grammar to tell a command from
data: quotes, escapes, comments, ``$(...)``/backtick substitutions (their commands are *captured*),
``${...}`` and arithmetic, pipes and command lists, redirections, heredocs (their bodies are data).
Not a full parser: anything it does not understand ends up as plain word text, never as a site.

``make=True`` reads a Makefile recipe: ``$$`` is the shell's ``$`` and ``$(NAME)``/``${NAME}`` are
make variables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPECIAL = set("@*#?$!-0123456789")
_REDIRECT = re.compile(r"[0-9]*(?:<<<|<>|<&|>&|>>|>\||&>>?|<|>)[0-9-]*")


@dataclass
class Word:
    start: int  # offsets in the text
    end: int
    raw: str  # the source text of the word
    value: Optional[str]  # its literal value (quotes removed), None when it holds an expansion or substitution


@dataclass
class Command:
    words: List[Word]
    captured: bool = False  # inside $(...) or backticks: its output is read by the script
    piped_out: bool = False  # its output goes into a pipe
    piped_in: bool = False
    redirects: List[Word] = field(default_factory=list)  # the targets of its redirections
    argv: bool = False  # an exec-form (JSON) command: each word is one argument, its quotes are JSON
    pipeline: int = 0  # commands joined by pipes share this number


@dataclass
class Expansion:
    name: str
    start: int  # offsets of the name itself (without ``$`` and braces)
    end: int
    make: bool = False  # a make variable reference $(NAME)


@dataclass
class Shell:
    commands: List[Command] = field(default_factory=list)
    expansions: List[Expansion] = field(default_factory=list)


class _Lexer:
    def __init__(self, text: str, end: int, make: bool) -> None:
        self.text, self.stop, self.make = text, end, make
        self.out = Shell()
        self.heredocs: List[Tuple[str, bool]] = []  # pending (delimiter, strip leading tabs)
        self.pipelines = 0

    # -- expansions ---------------------------------------------------------------------------------
    def _braced(self, i: int) -> int:
        """``i`` at ``{`` after ``$``: record the name, scan the rest for expansions; returns past ``}``."""
        j = i + 1
        name = _NAME.match(self.text, j)
        if name and name.end() <= self.stop:
            self.out.expansions.append(Expansion(name.group(), name.start(), name.end(), make=False))
            j = name.end()
        depth = 1
        while j < self.stop and depth:
            c = self.text[j]
            if c == "\\":
                j += 2
                continue
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
            elif c == "$":
                j = self.dollar(j)
                continue
            j += 1
        return j

    def dollar(self, i: int, captured: bool = False) -> int:
        """``text[i] == '$'``: record what it expands; returns the offset past it."""
        t = self.text
        if self.make:
            if t.startswith("$$", i):
                return self._shell_dollar(i + 1)
            if t.startswith("$(shell ", i):  # make's shell function: its commands' output is read
                return self.run(i + 8, ")", captured=True)
            if i + 1 < self.stop and t[i + 1] in "({":
                close = ")" if t[i + 1] == "(" else "}"
                name = _NAME.match(t, i + 2)
                if name and t.startswith(close, name.end()):
                    self.out.expansions.append(Expansion(name.group(), name.start(), name.end(), make=True))
                    return name.end() + 1
                return self._skip_balanced(i + 1, t[i + 1], close)
            return i + 2  # $@, $<, $X: make's automatic and one-letter variables
        return self._shell_dollar(i)

    def _shell_dollar(self, i: int) -> int:
        t = self.text
        if t.startswith("$((", i):
            return self._skip_balanced(i + 1, "(", ")")
        if t.startswith("$(", i):
            return self.run(i + 2, ")", captured=True)
        if t.startswith("${", i):
            return self._braced(i + 1)
        name = _NAME.match(t, i + 1)
        if name and name.end() <= self.stop:
            self.out.expansions.append(Expansion(name.group(), name.start(), name.end()))
            return name.end()
        if i + 1 < self.stop and t[i + 1] in _SPECIAL:
            return i + 2
        return i + 1

    def _skip_balanced(self, i: int, opener: str, closer: str) -> int:
        depth, j = 0, i
        while j < self.stop:
            if self.text[j] == opener:
                depth += 1
            elif self.text[j] == closer:
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return j

    # -- quotes -------------------------------------------------------------------------------------
    def _double(self, i: int) -> Tuple[int, Optional[str]]:
        """``i`` past the opening ``"``: returns past the closing one and the literal value (None: dynamic)."""
        t, value, dynamic = self.text, [], False
        while i < self.stop and t[i] != '"':
            c = t[i]
            if c == "\\" and i + 1 < self.stop:
                value.append(t[i + 1] if t[i + 1] in '"\\$`' else c + t[i + 1])
                i += 2
            elif c == "$" and i + 1 < self.stop and (t[i + 1] in "({" or _NAME.match(t, i + 1) or t[i + 1] in _SPECIAL):
                i, dynamic = self.dollar(i), True
            elif c == "`":
                i, dynamic = self.run(i + 1, "`", captured=True), True
            else:
                value.append(c)
                i += 1
        return i + 1, (None if dynamic else "".join(value))

    # -- heredocs -----------------------------------------------------------------------------------
    def _heredoc_start(self, i: int) -> int:
        """``i`` past ``<<``: read the delimiter word and queue the body."""
        t = self.text
        strip = t.startswith("-", i)
        i += 1 if strip else 0
        while i < self.stop and t[i] in " \t":
            i += 1
        match = re.compile(r"""'([^']*)'|"([^"]*)"|([^\s;&|<>()]+)""").match(t, i)
        if not match:
            return i
        delimiter = next(g for g in match.groups() if g is not None).replace("\\", "")
        self.heredocs.append((delimiter, strip))
        return match.end()

    def _heredoc_bodies(self, i: int) -> int:
        """``i`` at the start of the line after the command: skip the queued bodies (data)."""
        t = self.text
        for delimiter, strip in self.heredocs:
            while i < self.stop:
                end = t.find("\n", i, self.stop)
                end = self.stop if end < 0 else end
                line = t[i:end]
                i = end + 1
                if (line.lstrip("\t") if strip else line).rstrip("\r") == delimiter:
                    break
        self.heredocs = []
        return min(i, self.stop)

    # -- commands -----------------------------------------------------------------------------------
    def run(self, i: int, closer: str = "", captured: bool = False) -> int:
        """Read commands from ``i`` up to ``closer`` (or the end); returns the offset past it."""
        t = self.text
        words: List[Word] = []
        redirects: List[Word] = []
        state = {"start": None, "value": [], "dynamic": False, "piped_in": False, "redirect": False}

        def flush_word(at: int) -> None:
            if state["start"] is None:
                return
            raw = t[state["start"]:at]
            word = Word(state["start"], at, raw, None if state["dynamic"] else "".join(state["value"]))
            (redirects if state["redirect"] else words).append(word)
            state.update(start=None, value=[], dynamic=False, redirect=False)

        def begin(at: int) -> None:
            if state["start"] is None:
                state["start"] = at

        def flush_command(piped_out: bool) -> None:
            nonlocal words, redirects
            if words or redirects:
                if not state["piped_in"]:
                    self.pipelines += 1
                self.out.commands.append(Command(words, captured, piped_out, state["piped_in"], redirects,
                                                 pipeline=self.pipelines))
            words, redirects = [], []
            state["piped_in"] = piped_out

        depth = 0  # parentheses opened inside $( ... ) that are not the closer
        while i < self.stop:
            c = t[i]
            if closer and c == closer and (closer != ")" or depth == 0):
                flush_word(i)
                flush_command(False)
                return i + 1
            if c in " \t\r":
                flush_word(i)
                i += 1
            elif c == "\\":
                if t.startswith("\\\n", i) or t.startswith("\\\r\n", i):
                    flush_word(i)
                    i += 2 if t[i + 1] == "\n" else 3
                else:
                    begin(i)
                    state["value"].append(t[i + 1] if i + 1 < self.stop else "")
                    i += 2
            elif c == "\n":
                flush_word(i)
                flush_command(False)
                state["piped_in"] = False
                i = self._heredoc_bodies(i + 1) if self.heredocs else i + 1
            elif c == "#" and state["start"] is None:
                end = t.find("\n", i, self.stop)
                i = self.stop if end < 0 else end
            elif c in ";&|" and not t.startswith("&>", i):
                flush_word(i)
                two = t[i:i + 2]
                if two in ("&&", "||", ";;", "|&"):
                    flush_command(False)
                    state["piped_in"] = False
                    i += 2
                elif c == "|":
                    flush_command(True)
                    i += 1
                else:
                    flush_command(False)
                    state["piped_in"] = False
                    i += 1
            elif c == "(" and state["start"] is not None and t[state["start"]:i].endswith("="):
                i = self._skip_balanced(i, "(", ")")  # an array assignment a=( ... )
                state["dynamic"] = True
            elif c in "()":
                if c == "(" and closer == ")":
                    depth += 1
                elif c == ")" and depth:
                    depth -= 1
                flush_word(i)
                flush_command(False)
                i += 1
            elif c in "<>" or t.startswith("&>", i):
                if t.startswith("<<", i) and not t.startswith("<<<", i):
                    flush_word(i)
                    i = self._heredoc_start(i + 2)
                    continue
                if state["start"] is not None and t[state["start"]:i].isdigit():  # 2>: the fd is the operator's
                    state.update(start=None, value=[], dynamic=False)
                else:
                    flush_word(i)
                match = _REDIRECT.match(t, i)
                operator = match.group() if match else c
                i += max(len(operator), 1)
                if not re.search(r"&[0-9-]+$", operator):  # >&2, 2>&1 duplicate a descriptor: no target word
                    state["redirect"] = True
            elif c == "'":
                begin(i)
                end = t.find("'", i + 1, self.stop)
                end = self.stop if end < 0 else end
                state["value"].append(t[i + 1:end])
                i = end + 1
            elif c == '"':
                begin(i)
                i, value = self._double(i + 1)
                if value is None:
                    state["dynamic"] = True
                else:
                    state["value"].append(value)
            elif c == "$":
                begin(i)
                j = self.dollar(i)
                if j == i + 1 and not self.make:
                    state["value"].append("$")
                else:
                    state["dynamic"] = True
                i = j
            elif c == "`":
                begin(i)
                i = self.run(i + 1, "`", captured=True)
                state["dynamic"] = True
            else:
                begin(i)
                state["value"].append(c)
                i += 1
        flush_word(i)
        flush_command(False)
        return i


def parse(text: str, start: int = 0, end: Optional[int] = None, make: bool = False) -> Shell:
    """The commands and expansions of ``text[start:end]`` (offsets stay those of ``text``)."""
    lexer = _Lexer(text, len(text) if end is None else end, make)
    lexer.run(start)
    return lexer.out


ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\+?=")
