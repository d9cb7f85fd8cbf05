"""The multi-character pieces of the program tokenizer (`tokenizer.build_program_tokenizer`).

Why these pieces. In program mode the tool agent writes a whole Python program: under the character
tokenizer a warm-start demo (`atgrpo.warmstart.program_demos`) is 370-700 tokens, more than the tiny
model's context and about ten times an answer-mode response. The pieces are what those programs and
programs like them are made of, each one token: Python's keywords with the spaces they are written
with, the builtins and methods a search program calls (with their opening parenthesis, since a call
is how they are used), PEP 8 operators with their spaces, indentation runs, the answer format, and
the names and short idioms of the demo strategies (BFS, DFS, greedy walk, backtracking). A program
written another way still encodes, one character at a time where no piece fits.

The list is written out, not read from the demos or from `keyword.kwlist` at run time, so the
vocabulary never changes with the demos, the data or the Python version. Ids are positions (after
the characters), and a built model's folder keeps its own tokenizer, so an edit here never changes
a saved model, but it does change what the same `TinyModelSpec` builds: edit with care.

Measured on the warm-start demos of 100 train levels each (`tests/models/test_program_tokenizer.py`
checks it with a margin): Plan-Path 6x6 2.8-3.2 times and Sudoku 4x4 2.6-3.3 times fewer tokens
than the character tokenizer, every demo under 230 tokens. About a fifth of a Plan-Path program is
its level, which stays one token per cell (below).

Invariants (tested):
- every piece is at least two characters of printable ASCII, except a newline as its first
  character: the pre-tokenizer starts a word at each newline (`tokenizer.WORD_PATTERN`), so a piece
  with a newline anywhere else could never match;
- no piece is a run of level cells only (`.`, `#`, `A`, `G`, digits, the spaces between Sudoku
  cells): the program copies its level from the prompt as literal rows, and one cell per token keeps
  that copy aligned with the prompt's characters (quoted literals such as `"#"` are code, not cells);
- pieces are distinct.
"""

from __future__ import annotations

INDENTS = tuple(prefix + " " * n for prefix in ("\n", "") for n in (4, 8, 12, 16, 20))
"""A line break with the next line's indentation, 4 to 20 spaces (one token where a character
tokenizer spends up to 21), then the same runs alone (deeper code, or a long line's cut)."""

KEYWORDS = (
    # statements, with the space that follows them
    *("def ", "return ", "for ", "if ", "elif ", "while ", "import ", "from ", "class ", "with "),
    *("del ", "assert ", "raise ", "global ", "nonlocal ", "lambda ", "yield ", "except "),
    # operators and clauses inside an expression, with both spaces
    *(" in ", " not in ", " and ", " or ", " is ", " is not ", "not ", " if ", " else ", " for ", " as "),
    # bare: at the end of a line or before a colon
    *("return", "else:", "try:", "finally:", "break", "continue", "pass", "True", "False", "None"),
)
"""Python's keywords as programs write them."""

BUILTIN_CALLS = (
    *("print(", "range(", "len(", "list(", "tuple(", "dict(", "set(", "str(", "int(", "abs(", "min("),
    *("max(", "sum(", "all(", "any(", "next(", "divmod(", "enumerate(", "zip(", "sorted(", "reversed("),
    *("map(", "isinstance(", "ord(", "chr("),
)
"""Builtins a search program calls, each with its opening parenthesis."""

METHOD_CALLS = (
    *(".append(", ".add(", ".pop(", ".get(", ".join(", ".split()", ".split(", ".strip()", ".items()"),
    *(".keys()", ".values()", ".index(", ".count(", ".insert(", ".extend(", ".remove(", ".copy()"),
    *(".find(", ".replace(", ".sort(", "append("),
)
"""Methods of lists, dicts, sets and strings, with the dot and the opening parenthesis."""

OPERATORS = (
    *(" = ", " == ", " != ", " <= ", " >= ", " < ", " > ", " + ", " - ", " * ", " / ", " // ", " % "),
    *(" += ", " -= ", " *= ", "==", "!=", "<=", ">=", "+=", "-=", "//", "**", "->"),
    *(", ", ": ", "):", "): ", "()", "[]", "{}", "][", ")]", "))", "((", "([", "])", "[(", "), ("),
    *("-1", "[0]", "(0)"),
)
"""Operators with PEP 8 spacing, then punctuation that comes in pairs (`g[y][x]`, `f(x))`)."""

LITERALS = (
    *('", "', '["', '"]', '"]"', '" "'),
    *('"#"', '"."', '"A"', '"G"', '"U"', '"D"', '"L"', '"R"', '"####"', '"#### ["', '"1234"'),
)
"""String literals of the demos: list items, the level's cell names, the moves, the answer format."""

IDENTIFIERS = (
    # the demo strategies' names (`program_demos`)
    *("find(", "find", "path", "queue", "seen", "moves", "found", "dfs", "solve", "ok", "row", "ch", "dr", "dc"),
    *("gr", "gc"),
    # names other search programs commonly use
    *("grid", "start", "goal", "visited", "stack", "parent", "dist", "cur", "nxt", "best", "step"),
    *("board", "cell", "digit", "count", "result"),
)
"""Names of the demo programs, then common names of search programs."""

IDIOMS = (
    *("(r, c)", "(y, x)", "r, c", "y, x", "dr, dc", "(gr, gc)", "r + dr", "c + dc"),
    *("g[r][c]", "g[y][x]", "[r]", "[c]", "[i]", "[j]", " in range(", "0 <= "),
)
"""Spans the demo programs repeat: coordinates, one step of a move, the cell they index, a loop."""

GROUPS = (INDENTS, KEYWORDS, BUILTIN_CALLS, METHOD_CALLS, OPERATORS, LITERALS, IDENTIFIERS, IDIOMS)
PROGRAM_PIECES: tuple[str, ...] = tuple(piece for group in GROUPS for piece in group)
"""Every piece, groups in order: the tokenizer gives them ids after the characters, in this order."""

__all__ = [
    "BUILTIN_CALLS",
    "IDENTIFIERS",
    "IDIOMS",
    "INDENTS",
    "KEYWORDS",
    "LITERALS",
    "METHOD_CALLS",
    "OPERATORS",
    "PROGRAM_PIECES",
]
