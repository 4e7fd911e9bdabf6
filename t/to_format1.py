#!/usr/bin/env python3
"""t/to_format1.py SEGMENT OUT

Test helper of t/031_format_upgrade.pl: rewrite one changestream segment
(raw or gzip, any format version) as a raw format version 1 segment with
the same entries, for testing how a format 2 writer takes over an archive
written by a format 1 writer.  Format 1 is docs/FORMAT.md sections 6 and 7
(64-byte header; entries of kind u8, u32 length, u64 dataStart, u64 walEnd,
i64 send time, data).  Entries are read with scripts/cs_decode.py, the
independent reader, and each frame keeps its entries.  Exits 1 if the
segment does not decode cleanly to its end.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import cs_decode as cd  # noqa: E402


def v1_header(h):
    body = struct.pack(">8sIIQQQQI8s", cd.SEGMENT_MAGIC, 1, 64, h["system_identifier"],
                       h["generation"], h["segment_index"], h["start_lsn"],
                       h["timeline"], b"\0" * 8)
    return body + struct.pack(">I", cd.crc32c(body))


def v1_frame(entries):
    body = b"".join(struct.pack(">cIQQq", kind.encode(), len(data), ds, we, st) + data
                    for (_, kind, ds, we, st, data) in entries)
    blen = struct.pack(">I", len(body))
    return cd.FRAME_MAGIC + blen + struct.pack(">I", cd.crc32c(blen, body)) + body


def main():
    src, out = sys.argv[1], sys.argv[2]
    _, buf, damage = cd.read_segment_bytes(src)
    if damage is not None:
        sys.exit("%s: %s at %d" % (src, damage[1], damage[0]))
    h = cd.decode_header(buf)
    off = h["header_size"]
    parts = [v1_header(h)]
    while off < len(buf):
        blen, why = cd.check_frame(buf, off, h["version"])
        if blen is None:
            sys.exit("%s: %s at offset %d" % (src, why, off))
        body = buf[off + cd.FRAME_HEADER_SIZE:off + cd.FRAME_HEADER_SIZE + blen]
        parts.append(v1_frame(cd.split_entries(body, h["version"])))
        off += cd.FRAME_HEADER_SIZE + blen
    with open(out, "wb") as f:
        f.write(b"".join(parts))
        f.flush()
        os.fsync(f.fileno())


if __name__ == "__main__":
    main()
