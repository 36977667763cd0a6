"""COPY text escaping (indexer.load.typed.copy_text) against PostgreSQL itself: whatever a string holds (backslashes,
tabs, newlines, carriage returns, a stored vLLM error body with its escaped JSON), COPY reads back the very string."""
from __future__ import annotations

import random

from hypothesis import example, given
from hypothesis import strategies as st

from indexer.load.typed.copytext import text

VLLM_BODY = ('{"events":["data: {\\"error\\":{\\"code\\":400,\\"message\\":\\"You passed 261121 input tokens and '
             'requested 1024 output tokens.\\\\nHowever\\tthe model\'s context length is only 262144 tokens.\\"}}",'
             '"data: [DONE]"]}\r\n')
_SPECIAL = st.sampled_from(["\\", "\t", "\n", "\r", "\\N", "\\\\", "a", "é", "\U0001f600", '"', "{", "}"])
_STRINGS = st.lists(st.one_of(_SPECIAL, st.text(min_size=0, max_size=5).filter(lambda s: "\x00" not in s)),
                    max_size=40).map("".join)

_BY_CHARACTER = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


@given(_STRINGS)
@example(VLLM_BODY)
@example("")
def test_text_escapes_exactly_the_four_characters(value):
    assert text(value) == "".join(_BY_CHARACTER.get(c, c) for c in value)


def test_copy_reads_back_what_text_wrote(conn):
    rng = random.Random(2078)
    pieces = ["\\", "\t", "\n", "\r", "\\N", "\\\\", "a", "é", "\U0001f600", '"', "{", "}", "\\t", " "]
    values = [VLLM_BODY, "\\N", "", *("".join(rng.choices(pieces, k=rng.randrange(40))) for _ in range(300))]
    conn.execute("CREATE TEMP TABLE copied (n int, v text)")
    with conn.cursor().copy("COPY copied (n, v) FROM STDIN") as cp:
        cp.write("".join(f"{n}\t{text(v)}\n" for n, v in enumerate(values)))
    assert [v for _, v in conn.execute("SELECT n, v FROM copied ORDER BY n")] == values
    conn.execute("DROP TABLE copied")
