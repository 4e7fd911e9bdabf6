#!/usr/bin/env python3
"""cs_fuzz.py - a seeded generator of damaged changestream generations.

    cs_fuzz.py --source GEN_DIR --out DIR --seed S [--first N] [--count N]

For every case number c in [first, first+count) it writes DIR/<name>, a copy
of the generation GEN_DIR renamed to <name> = 16 hex digits (0x00c5f0000000
+ c, so older than any real generation), with one mutation, and appends a
line "<name>\\t<case>\\t<mutation>" to DIR/cases.tsv.  The same seed and case
number always give the same bytes.  Case numbers below 1 give the unmutated
renamed copy (a control: every reader must accept it).

The renamed copy is valid: the identity file's generation and every
segment header's generation field (with its CRC) are rewritten, sealed
segments recompressed.  Then one mutation is applied (docs/FORMAT.md
sections 4-8):

  bytes      bit flips, truncation, insertion of random bytes, in the
             uncompressed segment or in the gzip bytes of a sealed one;
  frames     a frame duplicated, dropped, swapped with the next, its length
             field set to 0, 0x3FFFFFFF, 0x40000000, 0xFFFFFFF0, +-1;
  entries    (structure-aware: the frame CRC-32C is recomputed so that the
             entry and pgoutput parsers are reached) a pgoutput message
             truncated, extended, its type byte changed, a byte changed, an
             LSN changed, a count field set huge; an entry's kind or length
             changed, an entry duplicated or dropped, a position moved;
             format 3 (section 8.3): a 'b' or 'c' entry given a data
             length, a 'c' entry's flags above 255, a 'b' or 'c' entry's
             fields cut short or one of them changed;
  headers    (header CRC recomputed) segment index, generation, start_lsn,
             version, header size, system identifier, timeline changed;
  files      a segment removed, copied under another index, renamed, left
             empty, both .wal and .wal.gz present, replaced by a directory
             or a symbolic link loop; the identity file emptied, its
             created_at, start_lsn or generation garbled, a key removed.

Standard library only.  Prints nothing on success; cases.tsv says what each
case is.
"""

import argparse
import gzip
import os
import random
import re
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cs_decode import crc32c, split_entries, signed64, HEADER_SIZES  # noqa: E402  (same directory)

HDR = 64
FH = 12
EH = 29
NAME_BASE = 0x00c5f0000000
SEG = re.compile(r"^([0-9a-f]{16})\.wal(\.gz)?$")

# ---------------------------------------------------------------- format


def version_of(buf):
    """The format version a header says (1 when unknown or too short)."""
    if len(buf) < 16:
        return 1
    v = struct.unpack(">I", buf[8:12])[0]
    return v if v in HEADER_SIZES else 1


def frames_of(buf):
    """[(offset, body)] of the valid frames after the header."""
    out = []
    off = HEADER_SIZES[version_of(buf)]
    while off + FH <= len(buf):
        if buf[off:off + 4] != b"CSFR":
            break
        blen, crc = struct.unpack(">II", buf[off + 4:off + 12])
        if blen == 0 or off + FH + blen > len(buf):
            break
        body = buf[off + FH:off + FH + blen]
        if crc32c(buf[off + 4:off + 8], body) != crc:
            break
        out.append((off, body))
        off += FH + blen
    return out


def frame(body):
    ln = struct.pack(">I", len(body))
    return b"CSFR" + ln + struct.pack(">I", crc32c(ln, body)) + body


def entries_of(body, version):
    es = split_entries(body, version)
    if es is None:
        return []
    return [[k.encode("latin-1"), ds, we, st, d] for _, k, ds, we, st, d in es]


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def svarint(v):
    return varint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)


def new_state():
    """A frame's coder state: previous LSN, time; version 3: previous
    final LSN, BEGIN commit time, xid."""
    return [0, 0, 0, 0, 0]


def bc_fields(k, ds, d, state):
    """Version 3: the fields a 'b' or 'c' entry adds for its message d
    (section 8.3); a 'b' updates state."""
    if k == b"b":
        final, t, xid = struct.unpack(">QqI", d[1:])
        x = (xid - state[4]) & 0xFFFFFFFF
        f = (svarint(signed64(final - ds)) + svarint(signed64(t - state[3])) +
             svarint(x - (1 << 32) if x >> 31 else x))
        state[2], state[3], state[4] = final, t, xid
        return f
    flags, cl, el, t = struct.unpack(">BQQq", d[1:])
    return (varint(flags) + svarint(signed64(cl - state[2])) +
            svarint(signed64(el - ds)) + svarint(signed64(t - state[3])))


def entry_parts(version, e, state):
    """(head, fields, data) of an entry encoded as docs/FORMAT.md section 8
    says (version 1: the whole entry as head; state: the frame's coder
    state, new_state(), for versions 2 and 3)."""
    k, ds, we, st, d = e
    if version == 1:
        return k + struct.pack(">IQQq", len(d), ds, we, st) + d, b"", b""
    if k == b"w" and (we != ds or d[:1] == b"C" or (d[:1] == b"M" and len(d) > 1 and not d[1] & 1)):
        k = b"W"
    stored = k
    if version >= 3 and k == b"w" and len(d) == 21 and d[:1] == b"B":
        stored = b"b"
    elif version >= 3 and k == b"W" and len(d) == 26 and d[:1] == b"C":
        stored = b"c"
    f = b""
    if k in (b"w", b"W"):
        f += svarint(ds - state[0])
        state[0] = ds
    if k == b"W":
        f += svarint(we - ds)
    if k == b"k":
        f += svarint(we - state[0])
        state[0] = we
    if k in (b"W", b"k"):
        f += svarint(signed64(st - state[1]))
        state[1] = st
    if stored != k:
        return stored + varint(0), f + bc_fields(stored, ds, d, state), b""
    return k + varint(len(d)), f, d


def body_of(entries, version):
    """A frame body of the entries: versions 2, 3 as its three sections."""
    state = new_state()
    parts = [entry_parts(version, e, state) for e in entries]
    heads = b"".join(p[0] for p in parts)
    if version == 1:
        return heads
    fields = b"".join(p[1] for p in parts)
    return (varint(len(heads)) + heads + varint(len(fields)) + fields +
            b"".join(p[2] for p in parts))


def set_header(buf, offset, fmt, value):
    b = bytearray(buf)
    struct.pack_into(fmt, b, offset, value)
    struct.pack_into(">I", b, 60, crc32c(bytes(b[:60])))
    return bytes(b)


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    return gzip.decompress(raw) if path.endswith(".gz") else raw


def store(path, data, gz=None):
    if gz is None:
        gz = path.endswith(".gz")
    with open(path, "wb") as f:
        f.write(gzip.compress(data, compresslevel=1, mtime=0) if gz else data)

# ---------------------------------------------------------------- copy


def renamed_copy(src, dst, name):
    shutil.copytree(src, dst, symlinks=True)
    ident = os.path.join(dst, "generation")
    with open(ident, "rb") as f:
        text = f.read()
    text = re.sub(rb"(?m)^generation = [0-9a-f]{16}$", b"generation = " + name.encode(), text)
    with open(ident, "wb") as f:
        f.write(text)
    wal = os.path.join(dst, "wal")
    for fn in os.listdir(wal):
        if SEG.match(fn):
            p = os.path.join(wal, fn)
            store(p, set_header(load(p), 24, ">Q", int(name, 16)))


def segments(gen_dir):
    wal = os.path.join(gen_dir, "wal")
    by = {}
    for fn in sorted(os.listdir(wal)):
        m = SEG.match(fn)
        if m and (m.group(2) or int(m.group(1), 16) not in by):
            by[int(m.group(1), 16)] = os.path.join(wal, fn)
    return [by[i] for i in sorted(by)]

# ---------------------------------------------------------------- mutations


def pick_segment(rng, segs):
    # the newest (raw) segment is where recovery and torn tails live: weight it
    return segs[-1] if rng.random() < 0.4 else rng.choice(segs)


def m_bitflip(rng, segs, gen):
    p = pick_segment(rng, segs)
    b = bytearray(load(p))
    n = rng.choice([1, 1, 1, 2, 8])
    for _ in range(n):
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    store(p, bytes(b))
    return "bitflip x%d %s" % (n, os.path.basename(p))


def m_gzbytes(rng, segs, gen):
    gz = [p for p in segs if p.endswith(".gz")]
    if not gz:
        return m_bitflip(rng, segs, gen)
    p = rng.choice(gz)
    with open(p, "rb") as f:
        b = bytearray(f.read())
    how = rng.choice(["flip", "truncate", "append"])
    if how == "flip":
        i = rng.randrange(len(b))
        b[i] ^= 1 << rng.randrange(8)
    elif how == "truncate":
        del b[rng.randrange(len(b)):]
    else:
        b += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    with open(p, "wb") as f:
        f.write(b)
    return "gzip bytes %s %s" % (how, os.path.basename(p))


def m_truncate(rng, segs, gen):
    p = pick_segment(rng, segs)
    b = load(p)
    n = rng.choice([0, rng.randrange(HDR), rng.randrange(len(b)), len(b) - rng.randrange(1, 13)])
    store(p, b[:max(0, n)])
    return "truncate %s to %d of %d" % (os.path.basename(p), max(0, n), len(b))


def m_insert(rng, segs, gen):
    p = pick_segment(rng, segs)
    b = load(p)
    i = rng.randrange(len(b) + 1)
    junk = bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 12, 100])))
    if rng.random() < 0.3:
        junk = b"CSFR" + junk
    store(p, b[:i] + junk + b[i:])
    return "insert %d bytes at %d of %s" % (len(junk), i, os.path.basename(p))


def with_frames(rng, segs, need=1):
    order = segs[:]
    rng.shuffle(order)
    order.sort(key=lambda p: p != segs[-1] and rng.random() < 0.4)
    for p in order:
        b = load(p)
        fr = frames_of(b)
        if len(fr) >= need:
            return p, b, fr
    return None, None, None


def m_frames(rng, segs, gen):
    p, b, fr = with_frames(rng, segs)
    if p is None:
        return m_bitflip(rng, segs, gen)
    k = rng.randrange(len(fr))
    off, body = fr[k]
    end = off + FH + len(body)
    how = rng.choice(["dup", "drop", "swap", "len"])
    if how == "dup":
        nb = b[:end] + b[off:end] + b[end:]
    elif how == "drop":
        nb = b[:off] + b[end:]
    elif how == "swap" and k + 1 < len(fr):
        o2, b2 = fr[k + 1]
        e2 = o2 + FH + len(b2)
        nb = b[:off] + b[o2:e2] + b[off:end] + b[e2:]
    else:
        how = "len"
        v = rng.choice([0, 0x3FFFFFFF, 0x40000000, 0x40000001, 0xFFFFFFF0,
                        len(body) + 1, len(body) - 1, len(body) * 2])
        nb = b[:off + 4] + struct.pack(">I", v & 0xFFFFFFFF) + b[off + 8:]
        how = "len=0x%x" % v
    store(p, nb)
    return "frame %d/%d %s in %s" % (k, len(fr), how, os.path.basename(p))


def mutate_message(rng, d):
    """A pgoutput message changed so that its parser is exercised."""
    if not d:
        return bytes([rng.choice(b"BCIUDTRYM")]), "empty->type"
    t = chr(d[0])
    how = rng.choice(["trunc", "extend", "type", "byte", "field"])
    if how == "trunc":
        return d[:rng.randrange(len(d))], "%s truncated" % t
    if how == "extend":
        return d + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 9))), "%s extended" % t
    if how == "type":
        c = rng.choice(b"BCIUDTRYMOSEcAbPKrpX\x00")
        return bytes([c]) + d[1:], "%s type->%r" % (t, chr(c))
    if how == "byte":
        b = bytearray(d)
        b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), "%s byte" % t
    b = bytearray(d)
    big = rng.choice([0, 1, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF])
    try:
        if t == "B" and len(b) >= 9:
            struct.pack_into(">Q", b, 1, big & 0xFFFFFFFFFFFFFFFF)
            return bytes(b), "B final_lsn=%x" % big
        if t == "C" and len(b) >= 18:
            struct.pack_into(">Q", b, rng.choice([2, 10]), big & 0xFFFFFFFFFFFFFFFF)
            return bytes(b), "C lsn=%x" % big
        if t == "T" and len(b) >= 5:
            struct.pack_into(">I", b, 1, big & 0xFFFFFFFF)
            return bytes(b), "T count=%x" % big
        if t in "IUD" and len(b) >= 8:
            struct.pack_into(">H", b, 6, big & 0xFFFF)
            return bytes(b), "%s ncols=%x" % (t, big & 0xFFFF)
        if t == "M" and len(b) >= 10:
            z = b.find(b"\0", 10)
            if z > 0 and z + 5 <= len(b):
                struct.pack_into(">I", b, z + 1, big & 0xFFFFFFFF)
                return bytes(b), "M content length=%x" % (big & 0xFFFFFFFF)
        if t == "R":
            z = b.rfind(b"\0", 0, 60)
            b2 = bytes(b).replace(b"\0", b"\x01")
            return b2, "R strings unterminated"
    except struct.error:
        pass
    return d[:1], "%s only its type byte" % t


def m_entries(rng, segs, gen):
    p, b, fr = with_frames(rng, segs)
    if p is None:
        return m_bitflip(rng, segs, gen)
    k = rng.randrange(len(fr))
    off, body = fr[k]
    version = version_of(b)
    es = entries_of(body, version)
    if not es:
        return m_bitflip(rng, segs, gen)
    i = rng.randrange(len(es))
    hows = ["msg", "msg", "msg", "kind", "dup", "drop", "pos", "rawlen"]
    bc = [j for j, e in enumerate(es) if version >= 3 and
          entry_parts(version, e, new_state())[0][:1] in (b"b", b"c")]
    if bc:
        hows += ["bc", "bc", "bc"]
    how = rng.choice(hows)
    desc = how
    if how == "bc":
        i = rng.choice(bc)
        nbody, desc = mutate_bc(rng, es, i, version)
        store(p, b[:off] + frame(nbody) + b[off + FH + len(body):])
        return "entry %d/%d of frame %d %s in %s" % (i, len(es), k, desc, os.path.basename(p))
    if how == "msg":
        es[i][4], desc = mutate_message(rng, es[i][4])
    elif how == "kind":
        es[i][0] = bytes([rng.choice(b"wskx\x00bc" if version >= 3 else b"wskx\x00")])
        desc = "kind->%r" % es[i][0]
    elif how == "dup":
        es.insert(i, list(es[i]))
    elif how == "drop":
        del es[i]
        if not es:
            es = [[b"k", 0, 0, 0, b""]]
    elif how == "pos":
        es[i][2] = rng.choice([0, 1, 0xFFFFFFFFFFFFFFFF, max(0, es[i][2] - 0x100000)])
        desc = "walEnd=%x" % es[i][2]
    nbody = body_of(es, version)
    if how == "rawlen":
        # entry length field wrong, CRC right: entries do not fill the frame
        if version == 1:
            pos = len(body_of(es[:i], version))
            nb = bytearray(nbody)
            struct.pack_into(">I", nb, pos + 1, rng.choice([len(es[i][4]) + 1, 0xFFFFFFFF, 0x40000000]))
            nbody = bytes(nb)
        else:
            # the entry's data length (in the heads section) replaced by a
            # wrong one; the section lengths stay consistent
            state = new_state()
            parts = [list(entry_parts(version, e, state)) for e in es]
            bad = varint(rng.choice([len(es[i][4]) + 1, 0xFFFFFFFF, 0x40000000]))
            parts[i][0] = parts[i][0][:1] + bad
            heads = b"".join(q[0] for q in parts)
            fields = b"".join(q[1] for q in parts)
            nbody = (varint(len(heads)) + heads + varint(len(fields)) + fields +
                     b"".join(q[2] for q in parts))
    store(p, b[:off] + frame(nbody) + b[off + FH + len(body):])
    return "entry %d/%d of frame %d %s in %s" % (i, len(es), k, desc, os.path.basename(p))


def mutate_bc(rng, es, i, version):
    """Version 3: (body, description) of the entries es with the 'b' or 'c'
    entry i damaged in its encoding (section 8.3): given a data length
    (with as many data bytes, so that the sections still add up), its
    flags above 255 ('c'), its fields cut short (the fields section one
    byte shorter), or one of its fields changed (the frame still
    decodes, into another message)."""
    state = new_state()
    parts = [list(entry_parts(version, e, state)) for e in es]
    head, f, _ = parts[i]
    what = rng.choice(["n", "flags", "short", "value"] if head[:1] == b"c" else
                      ["n", "short", "value"])
    # the fields of 'w' (1 varint) or 'W' (3) come first
    base = 1 if head[:1] == b"b" else 3
    pos = 0
    for _ in range(base):
        while f[pos] & 0x80:
            pos += 1
        pos += 1
    if what == "n":
        n = rng.choice([1, 21, 26])
        parts[i][0] = head[:1] + varint(n)
        parts[i][2] = bytes(rng.randrange(256) for _ in range(n))
    elif what == "flags":
        parts[i][1] = f[:pos] + varint(rng.choice([256, 0x7FFF, 0xFFFFFFFF])) + f[pos + 1:]
    elif what == "short":
        parts[i][1] = f[:rng.randrange(len(f))]
        # the entries after it lose their fields too: cut only the last
        if i != len(parts) - 1:
            parts = parts[:i + 1]
    else:
        nb = bytearray(f)
        j = rng.randrange(pos, len(nb))
        nb[j] ^= 1 << rng.randrange(7)
        parts[i][1] = bytes(nb)
    heads = b"".join(q[0] for q in parts)
    fields = b"".join(q[1] for q in parts)
    body = (varint(len(heads)) + heads + varint(len(fields)) + fields +
            b"".join(q[2] for q in parts))
    return body, "%s %s" % (head[:1].decode(), what)


def m_header(rng, segs, gen):
    p = rng.choice(segs)
    b = load(p)
    if len(b) < HDR:
        return m_bitflip(rng, segs, gen)
    fields = ["index", "generation", "start_lsn", "version", "hsize", "sysid", "tli"]
    if version_of(b) >= 2 and len(b) >= 128 and b[64:128] != bytes(64):
        fields += ["seal", "seal_crc"]
    field = rng.choice(fields)
    h = struct.unpack(">8sIIQQQQI", b[:52])
    if field == "index":
        b = set_header(b, 32, ">Q", h[5] + rng.choice([1, -1 if h[5] else 2, 1000]))
    elif field == "generation":
        b = set_header(b, 24, ">Q", h[4] ^ (1 << rng.randrange(48)))
    elif field == "start_lsn":
        b = set_header(b, 40, ">Q", max(0, h[6] + rng.choice([-8, 8, -0x10000, 0x10000])))
    elif field == "version":
        other = [v for v in HEADER_SIZES if v != version_of(b)]
        b = set_header(b, 8, ">I", rng.choice([0, rng.choice(other), max(HEADER_SIZES) + 1,
                                               0xFFFFFFFF]))
    elif field == "hsize":
        b = set_header(b, 12, ">I", rng.choice([0, 63, 65, 192 - HEADER_SIZES[version_of(b)],
                                                0xFFFFFFFF]))
    elif field == "seal":
        # a seal field changed, its CRC made to match: it lies about the body
        nb = bytearray(b)
        o = 64 + 8 * rng.randrange(6)
        struct.pack_into(">Q", nb, o, struct.unpack(">Q", nb[o:o + 8])[0] ^ (1 << rng.randrange(40)))
        struct.pack_into(">I", nb, 124, crc32c(bytes(nb[64:124])))
        b = bytes(nb)
    elif field == "seal_crc":
        nb = bytearray(b)
        nb[64 + rng.randrange(60)] ^= 1 << rng.randrange(8)
        b = bytes(nb)
    elif field == "sysid":
        b = set_header(b, 16, ">Q", h[3] ^ 1)
    else:
        b = set_header(b, 48, ">I", h[7] + 1)
    store(p, b)
    return "header %s of %s" % (field, os.path.basename(p))


def m_files(rng, segs, gen):
    wal = os.path.join(gen, "wal")
    how = rng.choice(["remove", "copy0", "rename", "empty", "twin", "dir", "symloop",
                      "ident_empty", "ident_created", "ident_lsn", "ident_key", "ident_gen",
                      "ident_junk"])
    mid = segs[len(segs) // 2]
    if how == "remove":
        os.unlink(mid)
        return "remove %s" % os.path.basename(mid)
    if how == "copy0":
        idx = len(segs) + rng.randrange(3)
        dst = os.path.join(wal, "%016x.wal.gz" % idx)
        shutil.copyfile(segs[0], dst if segs[0].endswith(".gz") else dst[:-3])
        return "copy of segment 0 as index %d" % idx
    if how == "rename":
        m = SEG.match(os.path.basename(mid))
        dst = os.path.join(wal, "%016x.wal%s" % (len(segs) + 5, m.group(2) or ""))
        os.rename(mid, dst)
        return "rename %s to %s" % (os.path.basename(mid), os.path.basename(dst))
    if how == "empty":
        open(mid, "wb").close()
        return "empty %s" % os.path.basename(mid)
    if how == "twin":
        p = segs[0]
        if p.endswith(".gz"):
            b = bytearray(load(p))
            if len(b) > HEADER_SIZES[version_of(b)] + 20:
                b[HEADER_SIZES[version_of(b)] + 20] ^= 0x10      # the raw leftover is ignored: damage it
            store(p[:-3], bytes(b), gz=False)
            return "raw twin (damaged) beside %s" % os.path.basename(p)
        return m_bitflip(rng, segs, gen)
    if how == "dir":
        os.unlink(mid)
        os.mkdir(mid)
        return "directory named %s" % os.path.basename(mid)
    if how == "symloop":
        os.unlink(mid)
        os.symlink(os.path.basename(mid), mid)
        return "symlink loop named %s" % os.path.basename(mid)
    ident = os.path.join(gen, "generation")
    with open(ident, "rb") as f:
        text = f.read()
    if how == "ident_empty":
        text = b""
    elif how == "ident_created":
        text = re.sub(rb"(?m)^created_at = .*$", rng.choice(
            [b"created_at = yesterday", b"created_at = 2026-13-45T99:99:99.000000Z",
             b"created_at = ", b"created_at = 99999-01-01T00:00:00.000000Z"]), text)
    elif how == "ident_lsn":
        text = re.sub(rb"(?m)^start_lsn = .*$", rng.choice(
            [b"start_lsn = nowhere", b"start_lsn = 0/0", b"start_lsn = FFFFFFFF/FFFFFFFF",
             b"start_lsn = 1/"]), text)
    elif how == "ident_key":
        key = rng.choice([b"format_version", b"generation", b"system_identifier",
                          b"timeline", b"start_lsn"])
        text = re.sub(rb"(?m)^" + key + rb" = .*\n", b"", text)
        how = "ident without %s" % key.decode()
    elif how == "ident_gen":
        text = re.sub(rb"(?m)^generation = .*$", b"generation = 0000000000000001", text)
    else:
        text = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 2000)))
    with open(ident, "wb") as f:
        f.write(text)
    return how


MUTATIONS = [(m_bitflip, 3), (m_gzbytes, 1), (m_truncate, 2), (m_insert, 1),
             (m_frames, 3), (m_entries, 6), (m_header, 1), (m_files, 2)]


def make_case(source, out, seed, case):
    name = "%016x" % (NAME_BASE + case)
    dst = os.path.join(out, name)
    if os.path.lexists(dst):
        shutil.rmtree(dst)
    renamed_copy(source, dst, name)
    if case < 1:
        return name, "control (unmutated copy)"
    rng = random.Random(seed * 1000003 + case)
    fns = [f for f, w in MUTATIONS for _ in range(w)]
    fn = rng.choice(fns)
    segs = segments(dst)
    if not segs:
        return name, "no segments"
    return name, fn(rng, segs, dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", required=True, help="a generation directory")
    ap.add_argument("--out", required=True, help="where the cases are written")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--count", type=int, default=100)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "cases.tsv"), "a") as tsv:
        for c in range(args.first, args.first + args.count):
            name, desc = make_case(args.source, args.out, args.seed, c)
            tsv.write("%s\t%d\t%s\n" % (name, c, desc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
