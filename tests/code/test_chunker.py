"""The chunker: declaration boundaries per language, coverage, hash stability, splitting, fallbacks."""

from __future__ import annotations

import sysconfig
import textwrap
from pathlib import Path

import pytest

from service.code.chunker import MAX_UNIT_LINES, WINDOW_LINES, Chunk, chunk_file, content_hash
from service.code.languages import ChunkKind
from service.code.walker import walk


def assert_well_formed(text: str, chunks: list[Chunk]) -> None:
    """Every non-blank line in exactly one chunk; chunks are the file's own lines, hashed."""
    lines = text.split("\n")
    owners = [0] * len(lines)
    for chunk in chunks:
        assert 1 <= chunk.start_line <= chunk.end_line <= len(lines)
        assert chunk.text == "\n".join(lines[chunk.start_line - 1 : chunk.end_line])
        assert chunk.text.split("\n")[0].strip() and chunk.text.split("\n")[-1].strip()
        assert chunk.content_hash == content_hash(chunk.text)
        for row in range(chunk.start_line - 1, chunk.end_line):
            owners[row] += 1
    for row, line in enumerate(lines):
        expected = (1,) if line.strip() else (0, 1)  # a blank line may sit inside a chunk
        assert owners[row] in expected, f"line {row + 1} is in {owners[row]} chunks"
    starts = [chunk.start_line for chunk in chunks]
    assert starts == sorted(starts)


# Three declarations per language; EDIT replaces a line inside the second one's body.
SAMPLES: dict[str, tuple[str, str, str, list[tuple[ChunkKind, str]]]] = {
    "python": (
        "m.py",
        '''
        import os

        # Adds numbers.
        @decorator
        def first(a, b):
            return a + b

        class Second:
            """Holds a value."""

            def get(self):
                return 1  # EDIT

        def third():
            return os.sep
        ''',
        "return 2  # EDITED",
        [(ChunkKind.FUNCTION, "first"), (ChunkKind.CLASS, "Second"), (ChunkKind.FUNCTION, "third")],
    ),
    "javascript": (
        "m.js",
        """
        import x from 'y';

        // Adds numbers.
        export function first(a, b) {
          return a + b;
        }

        const second = (a) => {
          return a * 2; // EDIT
        };

        class Third {
          run() { return 3; }
        }
        """,
        "return a * 3; // EDITED",
        [(ChunkKind.FUNCTION, "first"), (ChunkKind.FUNCTION, "second"), (ChunkKind.CLASS, "Third")],
    ),
    "typescript": (
        "m.ts",
        """
        import { x } from './y';

        /** A shape. */
        export interface First {
          a: number;
        }

        export function second(a: number): number {
          return a * 2; // EDIT
        }

        type Third = string | number;
        """,
        "return a * 3; // EDITED",
        [(ChunkKind.TYPE, "First"), (ChunkKind.FUNCTION, "second"), (ChunkKind.TYPE, "Third")],
    ),
    "tsx": (
        "m.tsx",
        """
        import React from 'react';

        export function First(): JSX.Element {
          return <div>first</div>;
        }

        export const Second = () => {
          return <span>second</span>; // EDIT
        };

        enum Third { A, B }
        """,
        "return <b>second</b>; // EDITED",
        [(ChunkKind.FUNCTION, "First"), (ChunkKind.FUNCTION, "Second"), (ChunkKind.TYPE, "Third")],
    ),
    "go": (
        "m.go",
        """
        package m

        import "fmt"

        // First is a type.
        type First struct {
        \tA int
        }

        func (f *First) Second() string {
        \treturn fmt.Sprint(f.A) // EDIT
        }

        func Third() int {
        \treturn 3
        }
        """,
        "return fmt.Sprint(f.A + 1) // EDITED",
        [(ChunkKind.TYPE, "First"), (ChunkKind.METHOD, "First.Second"), (ChunkKind.FUNCTION, "Third")],
    ),
    "rust": (
        "m.rs",
        """
        use std::fmt;

        /// First holds a value.
        #[derive(Debug)]
        struct First {
            a: i32,
        }

        impl First {
            fn second(&self) -> i32 {
                self.a * 2 // EDIT
            }
        }

        fn third() -> i32 {
            3
        }
        """,
        "self.a * 3 // EDITED",
        [(ChunkKind.TYPE, "First"), (ChunkKind.IMPL, "First"), (ChunkKind.FUNCTION, "third")],
    ),
    "java": (
        "M.java",
        """
        package m;

        import java.util.List;

        /** First. */
        @Deprecated
        class First {
          int a;
        }

        interface Second {
          default int run() {
            return 2; // EDIT
          }
        }

        enum Third { A, B }
        """,
        "return 3; // EDITED",
        [(ChunkKind.CLASS, "First"), (ChunkKind.TYPE, "Second"), (ChunkKind.CLASS, "Third")],
    ),
    "c": (
        "m.c",
        """
        #include <stdio.h>

        /* A point. */
        struct first {
          int a;
        };

        static int second(int a) {
          return a * 2; /* EDIT */
        }

        typedef int third_t;
        """,
        "return a * 3; /* EDITED */",
        [(ChunkKind.TYPE, "first"), (ChunkKind.FUNCTION, "second"), (ChunkKind.TYPE, "third_t")],
    ),
    "cpp": (
        "m.cpp",
        """
        #include <vector>

        // First.
        class First {
         public:
          int a;
        };

        template <typename T>
        T second(T a) {
          return a * 2; // EDIT
        }

        int First::third() const {
          return 3;
        }
        """,
        "return a * 3; // EDITED",
        [(ChunkKind.CLASS, "First"), (ChunkKind.FUNCTION, "second"), (ChunkKind.FUNCTION, "First::third")],
    ),
    "ruby": (
        "m.rb",
        """
        require 'set'

        # First.
        class First
          def a; 1; end
        end

        def second(a)
          a * 2 # EDIT
        end

        module Third
        end
        """,
        "a * 3 # EDITED",
        [(ChunkKind.CLASS, "First"), (ChunkKind.FUNCTION, "second"), (ChunkKind.MODULE, "Third")],
    ),
}


def sample(language: str) -> tuple[str, str, str, list[tuple[ChunkKind, str]]]:
    path, source, replacement, expected = SAMPLES[language]
    return path, textwrap.dedent(source).lstrip("\n"), replacement, expected


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_declarations_are_found_with_their_comments(language: str) -> None:
    path, text, _replacement, expected = sample(language)

    chunks = chunk_file(path, text)

    assert_well_formed(text, chunks)
    declarations = [
        (chunk.kind, chunk.symbol) for chunk in chunks if chunk.kind not in (ChunkKind.PREAMBLE, ChunkKind.GAP)
    ]
    assert declarations == expected
    assert chunks[0].kind is ChunkKind.PREAMBLE
    first = chunks[1]
    assert first.text.lstrip().startswith(("#", "//", "/*", "/**", "///", "@")) or language in ("javascript", "tsx")


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_an_edit_inside_one_declaration_changes_only_its_hash(language: str) -> None:
    path, text, replacement, _expected = sample(language)
    edited_line = next(line for line in text.split("\n") if "EDIT" in line)
    edited = text.replace(edited_line.strip(), replacement)
    assert edited != text

    before = {chunk.content_hash for chunk in chunk_file(path, text)}
    after = {chunk.content_hash for chunk in chunk_file(path, edited)}

    assert len(before - after) == 1
    assert len(after - before) == 1


@pytest.mark.parametrize("language", sorted(SAMPLES))
def test_lines_added_inside_one_declaration_change_only_its_hash(language: str) -> None:
    path, text, _replacement, _expected = sample(language)
    edited_line = next(line for line in text.split("\n") if "EDIT" in line)
    indent = edited_line[: len(edited_line) - len(edited_line.lstrip())]
    comment = "#" if language in ("python", "ruby") else "//"
    edited = text.replace(edited_line, f"{indent}{comment} one\n{indent}{comment} two\n{edited_line}")

    before = chunk_file(path, text)
    after = chunk_file(path, edited)

    assert len({c.content_hash for c in before} - {c.content_hash for c in after}) == 1
    assert len(after) == len(before)
    assert after[-1].start_line == before[-1].start_line + 2


def test_a_comment_separated_by_a_blank_line_is_not_attached() -> None:
    text = "# about the module\n\ndef f():\n    pass\n# trailing note\n\n# about g\ndef g():\n    pass\n"

    chunks = chunk_file("m.py", text)

    assert [(c.kind, c.start_line, c.end_line) for c in chunks] == [
        (ChunkKind.PREAMBLE, 1, 1),
        (ChunkKind.FUNCTION, 3, 4),
        (ChunkKind.GAP, 5, 5),
        (ChunkKind.FUNCTION, 7, 9),
    ]


def big_python_class(methods: int, body_lines: int) -> str:
    parts = ["import os", "", "", "# The big one.", "class Big(Base):", '    """Docstring."""', "", "    LIMIT = 3", ""]
    for index in range(methods):
        parts.append(f"    # method {index}")
        parts.append(f"    def m{index}(self):")
        parts.extend(f"        x{line} = {index}" for line in range(body_lines))
        parts.append("")
        if index == 2:
            parts.extend(["    OTHER = 4", ""])
    parts.append("def after():\n    return 1\n")
    return "\n".join(parts)


def test_a_large_class_is_split_into_header_and_methods() -> None:
    text = big_python_class(methods=10, body_lines=15)

    chunks = chunk_file("big.py", text)

    assert_well_formed(text, chunks)
    kinds = [(c.kind, c.symbol) for c in chunks]
    assert kinds[0] == (ChunkKind.PREAMBLE, None)
    assert kinds[1] == (ChunkKind.CLASS, "Big")
    assert chunks[1].text.startswith("# The big one.\nclass Big(Base):") and "LIMIT = 3" in chunks[1].text
    assert [symbol for kind, symbol in kinds if kind is ChunkKind.METHOD] == [f"Big.m{i}" for i in range(10)]
    assert (ChunkKind.CLASS, "Big") in kinds[5:]  # OTHER = 4 between methods keeps the class kind
    assert kinds[-1] == (ChunkKind.FUNCTION, "after")
    method_chunk = next(c for c in chunks if c.symbol == "Big.m4")
    assert method_chunk.text.lstrip().startswith("# method 4")


def test_a_class_under_the_limit_stays_whole() -> None:
    text = big_python_class(methods=3, body_lines=5)

    chunks = chunk_file("small.py", text)

    assert [c.kind for c in chunks] == [ChunkKind.PREAMBLE, ChunkKind.CLASS, ChunkKind.FUNCTION]


def test_a_large_java_class_is_split_and_its_closing_brace_joins_the_last_method() -> None:
    methods = "\n".join(
        f"  /** m{i}. */\n  public int m{i}() {{\n"
        + "".join(f"    int v{j} = {j};\n" for j in range(20))
        + "    return 0;\n  }\n"
        for i in range(8)
    )
    text = f"package p;\n\npublic class Big {{\n  private int x;\n\n{methods}}}\n"

    chunks = chunk_file("Big.java", text)

    assert_well_formed(text, chunks)
    assert [c.symbol for c in chunks if c.kind is ChunkKind.METHOD] == [f"Big.m{i}" for i in range(8)]
    assert chunks[-1].symbol == "Big.m7" and chunks[-1].text.endswith("  }\n}")


def test_a_large_ruby_module_splits_recursively() -> None:
    body = "".join(f"    def m{i}\n" + "      x = 1\n" * 30 + "    end\n\n" for i in range(5))
    text = f"module Outer\n  class Inner\n{body}  end\n\n  def self.helper\n    1\n  end\nend\n"

    chunks = chunk_file("outer.rb", text)

    assert_well_formed(text, chunks)
    assert [c.symbol for c in chunks if c.kind is ChunkKind.METHOD] == [f"Outer.Inner.m{i}" for i in range(5)]
    assert (ChunkKind.FUNCTION, "Outer.helper") in [(c.kind, c.symbol) for c in chunks]  # a module function


def test_a_long_function_is_cut_into_windows_that_keep_its_name() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(150))
    text = f"def long():\n{body}\n    return x0\n"

    chunks = chunk_file("long.py", text)

    assert_well_formed(text, chunks)
    assert len(chunks) == 4
    assert all(c.kind is ChunkKind.FUNCTION and c.symbol == "long" for c in chunks)
    assert all(c.end_line - c.start_line + 1 <= WINDOW_LINES for c in chunks)


def test_unknown_languages_are_cut_into_windows_preferring_blank_lines() -> None:
    paragraphs = ["\n".join(f"para {p} line {i}" for i in range(12)) for p in range(10)]
    text = "\n\n".join(paragraphs) + "\n"

    chunks = chunk_file("notes.md", text)

    assert_well_formed(text, chunks)
    assert all(c.kind is ChunkKind.WINDOW and c.symbol is None for c in chunks)
    assert all(c.end_line - c.start_line + 1 <= WINDOW_LINES for c in chunks)
    assert all(c.text.split("\n")[0].endswith("line 0") for c in chunks)  # cuts fall on paragraph breaks


def test_window_boundaries_resynchronise_after_an_insertion() -> None:
    paragraphs = ["\n".join(f"para {p} line {i}" for i in range(12)) for p in range(30)]
    text = "\n\n".join(paragraphs)
    edited = text.replace("para 1 line 3", "para 1 line 3\ninserted", 1)

    before = {c.content_hash for c in chunk_file("notes.txt", text)}
    after = {c.content_hash for c in chunk_file("notes.txt", edited)}

    assert len(before - after) == 1


def test_a_file_without_declarations_is_windowed() -> None:
    text = "import os\n\nprint(os.sep)\n"

    chunks = chunk_file("script.py", text)

    assert [(c.kind, c.start_line, c.end_line) for c in chunks] == [(ChunkKind.WINDOW, 1, 3)]


def test_a_syntax_error_stays_local() -> None:
    text = "def good_one():\n    return 1\n\ndef broken(:\n    return (\n\ndef good_two():\n    return 2\n"

    chunks = chunk_file("broken.py", text)

    assert_well_formed(text, chunks)
    symbols = [c.symbol for c in chunks if c.kind is ChunkKind.FUNCTION]
    assert "good_one" in symbols and "broken" not in symbols


@pytest.mark.parametrize("text", ["", "\n\n   \n", "\t"])
def test_blank_files_have_no_chunks(text: str) -> None:
    assert chunk_file("empty.py", text) == []


def test_crlf_and_replacement_characters_are_handled() -> None:
    text = "def f():\r\n    return '\ufffd'\r\n\r\ndef g():\r\n    return 2\r\n"

    chunks = chunk_file("crlf.py", text)

    assert_well_formed(text, chunks)
    assert [c.symbol for c in chunks] == ["f", "g"]


def test_chunks_are_deterministic() -> None:
    path, text, _replacement, _expected = sample("rust")

    assert chunk_file(path, text) == chunk_file(path, text)


def test_the_standard_library_chunks_cleanly() -> None:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    result = walk(stdlib, skip_dirs=["site-packages"])
    total = 0
    kinds: set[ChunkKind] = set()
    for walked in result.files:
        text = (stdlib / walked.path).read_text(encoding="utf-8", errors="replace")
        chunks = chunk_file(walked.path, text)
        assert_well_formed(text, chunks)
        assert all(c.end_line - c.start_line + 1 <= MAX_UNIT_LINES for c in chunks)
        total += len(chunks)
        kinds.update(c.kind for c in chunks)

    assert total > 30_000
    assert {ChunkKind.FUNCTION, ChunkKind.CLASS, ChunkKind.METHOD, ChunkKind.PREAMBLE, ChunkKind.WINDOW} <= kinds


def long_body(indent: str, statement: str, lines: int = 30) -> str:
    return "".join(f"{indent}{statement.format(i=i)}\n" for i in range(lines))


@pytest.mark.parametrize(
    ("path", "text", "expected"),
    [
        (
            "big.rs",
            "use a;\n\nimpl Big {\n"
            + "".join(
                f"    /// doc {i}\n    fn m{i}(&self) {{\n{long_body('        ', 'let x{i} = 1;')}    }}\n\n"
                for i in range(5)
            )
            + "}\n",
            [(ChunkKind.IMPL, "Big")] + [(ChunkKind.METHOD, f"Big.m{i}") for i in range(5)],
        ),
        (
            "big.cpp",
            "namespace ns {\n\n"
            + "".join(f"int f{i}() {{\n{long_body('  ', 'int x{i} = 1;')}}}\n\n" for i in range(5))
            + "}  // namespace ns\n",
            [(ChunkKind.MODULE, "ns")] + [(ChunkKind.FUNCTION, f"ns.f{i}") for i in range(5)],
        ),
        (
            "big.ts",
            "export class Big {\n  private a = 1;\n"
            + "".join(f"  m{i}(): void {{\n{long_body('    ', 'const x{i} = 1;')}  }}\n" for i in range(5))
            + "}\n",
            [(ChunkKind.CLASS, "Big")] + [(ChunkKind.METHOD, f"Big.m{i}") for i in range(5)],
        ),
    ],
)
def test_large_containers_split_into_members(path: str, text: str, expected: list[tuple[ChunkKind, str]]) -> None:
    chunks = chunk_file(path, text)

    assert_well_formed(text, chunks)
    assert [(c.kind, c.symbol) for c in chunks if c.kind is not ChunkKind.PREAMBLE] == expected
    assert chunks[-1].text.split("\n")[-1].startswith("}")  # the closing line joined the last member
    if path.endswith(".rs"):
        assert chunks[1 + 1].text.lstrip().startswith("/// doc 0")
