"""A generation's members on the wire as blocks: one per run of slots on a node. Pure.

A ``GenerationStarted`` (and ``RunAdmitted``, and the status summary) lists
every member of the group. Written one ``Member`` record each, a group of
10^5 ranks is 2.4 MB: over the 1 MB a Kafka record may be
(``events.limits.RECORD_MAX_BYTES``). Admission fills a node's slots in order
with the ids ``r0, r1, ..`` in rank order (``controller.admission``), so the
members come in runs: consecutive ids on one node's consecutive slots. The
wire form (the schema field :data:`FIELD`, beside a ``members`` left empty)
writes each run once, as a :class:`block <pack>` ``{first_id, count, node,
first_slot, domain}``; a group of 10^5 ranks on 12,500 nodes of 8 is 12,500
blocks: a record of 311,203 bytes with the names of ``bench/scale.py``.

The dataclasses never see blocks: ``events.codec`` packs ``members`` into
blocks when it encodes a type whose schema has the field, and unpacks them when
it decodes, so the fold, the projector and every view read the same
``tuple[Member, ...]`` as before. Older records (a schema without the field, or
with it empty) keep their members as written. A member whose id does not
continue the run before it (an elastic newcomer's id, another node, a gap in
the slots) starts a block of its own, so any member list round-trips exactly.

What a block may say is bounded before anything is built from it, since a
forged or damaged record could otherwise ask for a billion members: a block
holds at most :data:`BLOCK_MAX` members (a node's slot bound,
``controller.spec.bounds.MAX_SLOTS_PER_NODE``) and a record at most
:data:`MEMBERS_MAX`. :func:`wire_bytes` is the exact size of the blocks as
Avro writes them, which admission holds under :data:`PLACEMENT_MAX_BYTES`.

Tested in tests/events/test_placement.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from events.errors import InvalidEvent
from events.limits import varint_bytes

FIELD = "placement"
BLOCK_MAX = 1024  # == controller.spec.bounds.MAX_SLOTS_PER_NODE (a test holds them equal)
MEMBERS_MAX = 1 << 20  # above controller.spec.bounds.MAX_WORLD_SIZE, with room for old logs
# What a GenerationStarted's blocks may take of its 1,000,000-byte record: the rest
# (header, reason, resume manifest path of up to 4,096 characters, signature and
# chain headers) is far under the 100,000 left.
PLACEMENT_MAX_BYTES = 900_000

Block = dict[str, Any]
MemberRecord = dict[str, Any]


def numbered(lid: str) -> tuple[str, int | None]:
    """``("r", 12)`` for ``r12``; a number with a leading zero or none at all: (lid, None)."""
    digits = len(lid) - len(lid.rstrip("0123456789"))
    number = lid[len(lid) - digits:]
    if not digits or (len(number) > 1 and number[0] == "0"):
        return lid, None
    return lid[:len(lid) - digits], int(number)


# A member as the packer reads it: (logical_id, node, slot, domain).
Fields = tuple[str, str, int, "str | None"]


def pack(members: Iterable[Fields]) -> list[Block]:
    """The blocks of ``members``, in their order: a member joins the block before it
    when it is on the same node and domain, in the next slot, with the next id
    (``<prefix><n+1>``)."""
    blocks: list[Block] = []
    prefix: str = ""
    last: int | None = None
    for lid, node, slot, domain in members:
        if blocks:
            b = blocks[-1]
            if (last is not None and b["count"] < BLOCK_MAX and node == b["node"]
                    and domain == b["domain"] and slot == b["first_slot"] + b["count"]
                    and numbered(lid) == (prefix, last + 1)):
                b["count"] += 1
                last += 1
                continue
        prefix, last = numbered(lid)
        blocks.append({"first_id": lid, "count": 1, "node": node, "first_slot": slot,
                       "domain": domain})
    return blocks


def unpack(blocks: Sequence[Block]) -> list[MemberRecord]:
    """The member records ``blocks`` stand for; ``InvalidEvent`` names a block that
    cannot be one (a count out of range, a run of ids from an unnumbered id)."""
    total = 0
    for i, b in enumerate(blocks):
        count = b["count"]
        if not 1 <= count <= BLOCK_MAX:
            raise InvalidEvent(f"{FIELD}[{i}].count must be 1..{BLOCK_MAX}, got {count}")
        if count > 1 and numbered(b["first_id"])[1] is None:
            raise InvalidEvent(f"{FIELD}[{i}]: {count} members from {b['first_id']!r}, "
                               "an id without a number to count from")
        total += count
    if total > MEMBERS_MAX:
        raise InvalidEvent(f"{FIELD} names {total} members, over the limit of {MEMBERS_MAX}")
    out: list[MemberRecord] = []
    for b in blocks:
        node, slot, domain, count = b["node"], b["first_slot"], b["domain"], b["count"]
        if count == 1:
            out.append({"logical_id": b["first_id"], "node": node, "slot": slot,
                        "domain": domain})
            continue
        prefix, first = numbered(b["first_id"])
        assert first is not None  # checked above
        out.extend({"logical_id": f"{prefix}{first + k}", "node": node, "slot": slot + k,
                    "domain": domain} for k in range(count))
    return out


def _text_bytes(s: str) -> int:
    raw = len(s.encode())
    return varint_bytes(raw) + raw


def wire_bytes(blocks: Sequence[Block]) -> int:
    """The bytes Avro writes for ``blocks`` as the :data:`FIELD` array: its count,
    each block (the domain's union branch is one byte), and the closing zero."""
    total = (varint_bytes(len(blocks)) if blocks else 0) + 1
    for b in blocks:
        total += _text_bytes(b["first_id"]) + varint_bytes(b["count"]) \
            + _text_bytes(b["node"]) + varint_bytes(b["first_slot"]) + 1 \
            + (0 if b["domain"] is None else _text_bytes(b["domain"]))
    return total


def inflate(record: dict[str, Any]) -> dict[str, Any]:
    """A decoded record with its blocks unpacked into ``members`` (a record that has
    both is refused: its writer meant one of them)."""
    blocks = record.pop(FIELD, None)
    if blocks:
        if record.get("members"):
            raise InvalidEvent(f"both members and {FIELD} are set; a writer sets one")
        record["members"] = unpack(blocks)
    return record


def deflate(record: dict[str, Any]) -> dict[str, Any]:
    """A record about to be encoded with its ``members`` written as blocks."""
    record[FIELD] = pack((m["logical_id"], m["node"], m["slot"], m["domain"])
                         for m in record["members"])
    record["members"] = []
    return record
