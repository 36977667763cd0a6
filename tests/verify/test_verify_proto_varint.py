"""64-bit varints as Go reads them (encoding/binary.Uvarint, protowire.ConsumeVarint): ten bytes at most, the tenth
holding bit 63 alone; anything larger is refused, never read as a number of 2^64 or more."""
from __future__ import annotations

import pytest

from indexer.verify.proto import ProtoError, read_uvarint

MAX = bytes([0xFF] * 9 + [0x01])  # 2^64 - 1


def test_the_largest_64_bit_value_reads():
    assert read_uvarint(MAX, 0) == (2 ** 64 - 1, 10)
    assert read_uvarint(b"\x00" + bytes([0x80] * 9 + [0x01]), 1) == (2 ** 63, 11)


@pytest.mark.parametrize("tenth, said", [
    (0x02, "varint overflows 64 bits at offset 10"), (0x7F, "varint overflows 64 bits at offset 10"),
    (0x81, "varint longer than 10 bytes at offset 11"), (0xFF, "varint longer than 10 bytes at offset 11"),
])
def test_a_tenth_byte_past_bit_63_is_refused_naming_its_offset(tenth, said):
    data = b"\x08" + bytes([0xFF] * 9 + [tenth]) + b"\x00"
    with pytest.raises(ProtoError) as err:
        read_uvarint(data, 1)
    assert str(err.value) == said


def test_a_truncated_varint_is_refused():
    with pytest.raises(ProtoError, match="truncated varint at offset 3"):
        read_uvarint(b"\x80\x80\x80", 0)
