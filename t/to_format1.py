#!/usr/bin/env python3
"""t/to_format1.py [--version N] SEGMENT OUT

Test helper of t/031_format_upgrade.pl: rewrite one changestream segment
(raw or gzip, any format version) as a raw segment of an older format
version N (1, the default, or 2) with the same entries, for testing how
today's writer takes over an archive written by an older one.

Format 1 is docs/FORMAT.md sections 6 and 8.1 (64-byte header; entries of
kind u8, u32 length, u64 dataStart, u64 walEnd, i64 send time, data).
Format 2 is sections 6 and 8.2 (128-byte header whose seal area is copied
from the source when it has one; frame bodies of three sections, a message
stored as 'W' when it is a COMMIT, a non-transactional logical message or
its walEnd is not its dataStart, else as 'w').  Entries are read with
scripts/cs_decode.py, the independent reader, and each frame keeps its
entries.  Exits 1 if the segment does not decode cleanly to its end.
"""
import argparse
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import cs_decode as cd  # noqa: E402
import cs_fuzz  # noqa: E402


def header(h, version, seal):
    size = cd.HEADER_SIZES[version]
    body = struct.pack(">8sIIQQQQI8s", cd.SEGMENT_MAGIC, version, size,
                       h["system_identifier"], h["generation"], h["segment_index"],
                       h["start_lsn"], h["timeline"], b"\0" * 8)
    out = body + struct.pack(">I", cd.crc32c(body))
    if version >= 2:
        out += seal
    return out


def frame(body):
    blen = struct.pack(">I", len(body))
    return cd.FRAME_MAGIC + blen + struct.pack(">I", cd.crc32c(blen, body)) + body


def v1_body(entries):
    return b"".join(struct.pack(">cIQQq", kind.encode(), len(data), ds, we, st) + data
                    for (_, kind, ds, we, st, data) in entries)


uv = cs_fuzz.varint


def sv(v):
    """svarint of v taken modulo 2^64 (docs/FORMAT.md section 8.2)"""
    return cs_fuzz.svarint(cd.signed64(v))


def is_full(ds, we, data):
    """Section 8.2: does a message keep its walEnd and send time?"""
    if we != ds:
        return True
    if data[:1] == b"C":
        return True
    return len(data) >= 2 and data[:1] == b"M" and (data[1] & 1) == 0


def v2_body(entries):
    heads = bytearray()
    fields = bytearray()
    data_sec = bytearray()
    prev_lsn = prev_time = 0
    for (_, kind, ds, we, st, data) in entries:
        if kind == "w" and is_full(ds, we, data):
            kind = "W"
        if kind in ("w", "W"):
            fields += sv(ds - prev_lsn)
            prev_lsn = ds
        if kind == "W":
            fields += sv(we - ds)
        if kind == "k":
            fields += sv(we - prev_lsn)
            prev_lsn = we
        if kind in ("W", "k"):
            fields += sv(st - prev_time)
            prev_time = st
        heads += kind.encode() + uv(len(data))
        data_sec += data
    return uv(len(heads)) + bytes(heads) + uv(len(fields)) + bytes(fields) + bytes(data_sec)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", type=int, default=1, choices=(1, 2))
    ap.add_argument("src")
    ap.add_argument("out")
    args = ap.parse_args()
    _, buf, damage = cd.read_segment_bytes(args.src)
    if damage is not None:
        sys.exit("%s: %s at %d" % (args.src, damage[1], damage[0]))
    h = cd.decode_header(buf)
    off = h["header_size"]
    seal = buf[cd.SEAL_OFFSET:cd.SEAL_OFFSET + 64] if off >= 128 else b"\0" * 64
    parts = [header(h, args.version, seal)]
    while off < len(buf):
        blen, why = cd.check_frame(buf, off, h["version"])
        if blen is None:
            sys.exit("%s: %s at offset %d" % (args.src, why, off))
        body = buf[off + cd.FRAME_HEADER_SIZE:off + cd.FRAME_HEADER_SIZE + blen]
        entries = cd.split_entries(body, h["version"])
        parts.append(frame(v1_body(entries) if args.version == 1 else v2_body(entries)))
        off += cd.FRAME_HEADER_SIZE + blen
    with open(args.out, "wb") as f:
        f.write(b"".join(parts))
        f.flush()
        os.fsync(f.fileno())


if __name__ == "__main__":
    main()
