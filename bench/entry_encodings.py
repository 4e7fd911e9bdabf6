#!/usr/bin/env python3
"""bench/entry_encodings.py: what other layouts of the same entries would
cost after compression (issue 13's archive-size target).

    python3 bench/entry_encodings.py SEGMENT...   (raw .wal or .wal.gz)

Reads changestream WAL segments of format 1, 2 or 3 (docs/FORMAT.md sections
6 to 8; no CRC or damage checks: use it on archives known to be good),
re-encodes every entry with its dataStart kept exactly, and prints, for
each encoding, its raw size, its zlib level 6 size (gzip -6) and its ratio
to zlib level 6 of the pgoutput payload alone (gzip -6), then its size at
level 9 with memLevel 9 and that size's ratio to the same baseline.  Frames are kept as they are in the segments and
every encoding resets its state at each frame, as format 2 does.  It then
prints the empirical entropy of the dataStart deltas, per context
(previous message kind and relation, this message's kind and relation):
a lower bound, for an order-0 coder per context, of what the LSNs cost.

Encodings (the names printed):
  payload            the pgoutput messages only (the baseline)
  no_lsn             format 2 without the dataStart field (kind, varint
                     length, the W/k walEnd and send time fields, data)
  no_lsn_no_time     no_lsn without the send time of W entries
  v2                 format 2 as first written: each entry's kind, varint
                     length, fields and data together (before the frame
                     body was split into sections)
  v2_no_time         v2 without the send time of W entries
  v2_commit          v2, but a COMMIT's dataStart as a delta from the
                     end_lsn in its own payload (always 0 on PostgreSQL 15)
  v2_commit_div8     v2_commit, and LSN deltas that are multiples of 8
                     (WAL records are MAXALIGNed) stored divided by 8,
                     flagged in the low bit
  v2_transition      v2_commit, with each delta stored as the residual
                     against the last delta seen for the same (previous
                     kind/relation, this kind/relation) in the frame
  col                columnar frame: kinds and data lengths, then the
                     fields of every entry (v2's fields), then the data;
                     format 2 as written now (docs/FORMAT.md section 8.2)
  col_commit_div8    col with v2_commit_div8's fields
  col_split          col_commit_div8 with the send times in a stream of
                     their own
  col_split_zero     col_split, and an entry whose LSN residual is 0
                     takes another kind byte instead of storing the 0
  col_per_context    col_split_zero with one LSN stream per context
                     (previous kind/relation, this kind/relation)
  v3                 col, with each 21-byte BEGIN that is 'w' stored as
                     'b' and each 26-byte COMMIT that is 'W' as 'c': no
                     data, their message as fields (final LSN, commit
                     time and xid as deltas, flags, commit LSN from the
                     BEGIN's final LSN, end LSN from dataStart); format 3
                     as written now (docs/FORMAT.md section 8.3)
"""
import collections
import gzip
import math
import struct
import sys
import zlib

MASK = (1 << 64) - 1


def getvarint(b, p):
    v = 0
    s = 0
    while True:
        c = b[p]
        p += 1
        v |= (c & 127) << s
        s += 7
        if not c & 128:
            return v, p


def unzig(u):
    return (u >> 1) ^ -(u & 1)


def parse(path):
    """[(frame number, kind, dataStart, walEnd, send time, data)]"""
    with open(path, "rb") as f:
        d = f.read()
    if path.endswith(".gz"):
        d = gzip.decompress(d)
    ver, off = struct.unpack(">II", d[8:16])
    out = []
    frame = 0
    while off + 12 <= len(d) and d[off:off + 4] == b"CSFR":
        blen = struct.unpack(">I", d[off + 4:off + 8])[0]
        e = off + 12
        end = e + blen
        plsn = ptime = 0
        pfinal = pbtime = pxid = 0
        if ver != 1:
            # varint H | heads | varint F | fields | data (sections 8.2, 8.3)
            h, e = getvarint(d, e)
            end = e + h
            f, fpos = getvarint(d, end)
            dpos = fpos + f
        while e < end:
            k = chr(d[e])
            e += 1
            ds = we = st = 0
            if ver == 1:
                n, ds, we, st = struct.unpack(">IQQq", d[e:e + 28])
                p = e + 28
                nxt = p + n
            else:
                n, e = getvarint(d, e)
                p = fpos
                stored = k
                if ver >= 3 and k in "bc":
                    k = "w" if k == "b" else "W"
                if k in "wW":
                    u, p = getvarint(d, p)
                    ds = we = (plsn + unzig(u)) & MASK
                    plsn = ds
                if k == "W":
                    u, p = getvarint(d, p)
                    we = (ds + unzig(u)) & MASK
                if k == "k":
                    u, p = getvarint(d, p)
                    we = (plsn + unzig(u)) & MASK
                    plsn = we
                if k in "Wk":
                    u, p = getvarint(d, p)
                    st = ptime + unzig(u)
                    ptime = st
                rebuilt = None
                if stored == "b":
                    v = []
                    for _ in range(3):
                        u, p = getvarint(d, p)
                        v.append(unzig(u))
                    pfinal = (ds + v[0]) & MASK
                    pbtime += v[1]
                    pxid = (pxid + v[2]) & 0xFFFFFFFF
                    rebuilt = struct.pack(">cQqI", b"B", pfinal, pbtime, pxid)
                elif stored == "c":
                    fl, p = getvarint(d, p)
                    v = []
                    for _ in range(3):
                        u, p = getvarint(d, p)
                        v.append(unzig(u))
                    rebuilt = struct.pack(">cBQQq", b"C", fl, (pfinal + v[0]) & MASK,
                                          (ds + v[1]) & MASK, pbtime + v[2])
                fpos = p
                p = dpos
                nxt = dpos = dpos + n
            data = d[p:nxt] if ver == 1 or rebuilt is None else rebuilt
            if ver == 1 and k == "w" and (we != ds or data[:1] == b"C" or
                                          (data[:1] == b"M" and len(data) > 1 and not data[1] & 1)):
                k = "W"
            out.append((frame, k, ds, we, st, data))
            if ver == 1:
                e = nxt
        off += 12 + blen
        frame += 1
    return out


def uv(v):
    out = bytearray()
    while v >= 128:
        out.append((v & 127) | 128)
        v >>= 7
    out.append(v)
    return bytes(out)


def zig(v):
    return (v << 1) if v >= 0 else ((-v) << 1) - 1


def sv(v):
    return uv(zig(v))


def sv8(v):
    if v % 8 == 0:
        return uv(zig(v // 8) << 1)
    return uv((zig(v) << 1) | 1)


def rel(data):
    """context key of a message: its type, and the relation of a change"""
    if data[:1] in (b"I", b"U", b"D") and len(data) >= 5:
        return data[:5]
    return data[:1]


def commit_end(data):
    if data[:1] == b"C" and len(data) >= 18:
        return int.from_bytes(data[10:18], "big")
    return None


class Coder:
    """One frame's encoder state and options."""

    def __init__(self, commit=False, div8=False, transition=False):
        self.commit = commit
        self.div8 = div8
        self.transition = transition
        self.lsn = 0
        self.time = 0
        self.ctx = None
        self.last = {}

    def predict(self, data):
        if self.commit and commit_end(data) is not None:
            return commit_end(data)
        if self.transition and data[:1] != b"B":
            return self.lsn + self.last.get((self.ctx, rel(data)), 0)
        return self.lsn

    def lsn_residual(self, ds, data):
        r = ds - self.predict(data)
        key = (self.ctx, rel(data))
        self.last[key] = ds - self.lsn
        self.lsn = ds
        self.ctx = rel(data)
        return r, key

    def enc(self, v):
        return sv8(v) if self.div8 else sv(v)


def fields(c, e, with_lsn=True, with_time=True):
    """(LSN bytes, LSN context, walEnd and time bytes) of an entry"""
    _, k, ds, we, st, data = e
    lsn = b""
    key = None
    rest = b""
    if k in "wW" and with_lsn:
        r, key = c.lsn_residual(ds, data)
        lsn = c.enc(r)
    if k == "W":
        rest += sv(we - ds)
    if k == "k":
        rest += sv(we - c.lsn)
        c.lsn = we
    if k in "Wk" and (with_time or k == "k"):
        rest += sv(st - c.time)
        c.time = st
    return lsn, key, rest


def frames_of(ents):
    fr = collections.OrderedDict()
    for e in ents:
        fr.setdefault(e[0], []).append(e)
    return fr.values()


def frame(body):
    return b"CSFR" + struct.pack(">II", len(body), 0) + body


def interleaved(ents, with_lsn=True, with_time=True, **opt):
    out = bytearray()
    for fr in frames_of(ents):
        c = Coder(**opt)
        body = bytearray()
        for e in fr:
            lsn, _, rest = fields(c, e, with_lsn, with_time)
            f = lsn + rest
            body += e[1].encode() + uv(len(f) + len(e[5])) + f + e[5]
        out += frame(body)
    return bytes(out)


def columnar(ents, split_time=False, zero_kind=False, per_context=False, **opt):
    out = bytearray()
    for fr in frames_of(ents):
        c = Coder(**opt)
        heads = bytearray()
        streams = collections.OrderedDict()
        data = bytearray()
        for e in fr:
            lsn, key, rest = fields(c, e)
            kind = e[1]
            if zero_kind and lsn in (b"\x00",):
                kind = {"w": "v", "W": "V"}[kind]
                lsn = b""
            sname = key if per_context else "lsn"
            streams.setdefault(sname, bytearray()).extend(lsn)
            streams.setdefault("time" if split_time else sname, bytearray()).extend(rest)
            heads += kind.encode() + uv(len(e[5]))
            data += e[5]
        body = uv(len(heads)) + heads
        for s in streams.values():
            body += uv(len(s)) + s
        out += frame(body + data)
    return bytes(out)


def s64(v):
    v &= MASK
    return v - (1 << 64) if v >> 63 else v


def s32(v):
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >> 31 else v


def v3(ents):
    """Format 3 (docs/FORMAT.md section 8.3): col, with BEGIN and COMMIT
    stored as fields ('b', 'c') and no data."""
    out = bytearray()
    for fr in frames_of(ents):
        c = Coder()
        heads = bytearray()
        flds = bytearray()
        data = bytearray()
        final = btime = xid = 0
        for e in fr:
            lsn, _, rest = fields(c, e)
            kind = e[1]
            d = e[5]
            extra = b""
            if kind == "w" and len(d) == 21 and d[:1] == b"B":
                f, t, x = struct.unpack(">QqI", d[1:])
                extra = sv(s64(f - e[2])) + sv(t - btime) + sv(s32(x - xid))
                final, btime, xid = f, t, x
                kind, d = "b", b""
            elif kind == "W" and len(d) == 26 and d[:1] == b"C":
                fl, cl, el, t = struct.unpack(">BQQq", d[1:])
                extra = uv(fl) + sv(s64(cl - final)) + sv(s64(el - e[2])) + sv(t - btime)
                kind, d = "c", b""
            heads += kind.encode() + uv(len(d))
            flds += lsn + rest + extra
            data += d
        out += frame(uv(len(heads)) + heads + uv(len(flds)) + flds + data)
    return bytes(out)


def zsize(b, level=6, mem=8):
    c = zlib.compressobj(level, zlib.DEFLATED, 31, mem)
    return len(c.compress(b) + c.flush())


def entropy(ents):
    ctx = collections.defaultdict(collections.Counter)
    prev = 0
    pctx = None
    for _, k, ds, we, st, data in ents:
        if k not in "wW":
            continue
        ce = commit_end(data)
        ctx[(pctx, rel(data))][ds - (ce if ce is not None else prev)] += 1
        prev = ds
        pctx = rel(data)
    bits = 0.0
    for cnt in ctx.values():
        n = sum(cnt.values())
        bits -= sum(v * math.log2(v / n) for v in cnt.values())
    return bits, sum(sum(c.values()) for c in ctx.values())


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: entry_encodings.py SEGMENT...")
    ents = []
    base = 0
    for path in sys.argv[1:]:
        for e in parse(path):
            ents.append((e[0] + base,) + e[1:])
        base = ents[-1][0] + 1 if ents else base
    payload = b"".join(e[5] for e in ents)
    ref6 = zsize(payload)
    encodings = [
        ("payload", payload),
        ("no_lsn", interleaved(ents, with_lsn=False)),
        ("no_lsn_no_time", interleaved(ents, with_lsn=False, with_time=False)),
        ("v2", interleaved(ents)),
        ("v2_no_time", interleaved(ents, with_time=False)),
        ("v2_commit", interleaved(ents, commit=True)),
        ("v2_commit_div8", interleaved(ents, commit=True, div8=True)),
        ("v2_transition", interleaved(ents, commit=True, div8=True, transition=True)),
        ("col", columnar(ents)),
        ("col_commit_div8", columnar(ents, commit=True, div8=True)),
        ("col_split", columnar(ents, commit=True, div8=True, split_time=True)),
        ("col_split_zero", columnar(ents, commit=True, div8=True, split_time=True,
                                    zero_kind=True)),
        ("col_per_context", columnar(ents, commit=True, div8=True, split_time=True,
                                     zero_kind=True, per_context=True)),
        ("v3", v3(ents)),
    ]
    print("%-16s %10s %10s %8s %10s %8s" % ("encoding", "raw", "zlib6", "vs_gz6",
                                           "zlib9m9", "vs_gz6"))
    for name, b in encodings:
        z6 = zsize(b)
        z9 = zsize(b, 9, 9)
        print("%-16s %10d %10d %8.4f %10d %8.4f" % (name, len(b), z6, z6 / ref6,
                                                   z9, z9 / ref6))
    bits, n = entropy(ents)
    print("entries %d, messages %d" % (len(ents), n))
    print("lsn_entropy_bits %.0f (%.2f bits per message, %.0f bytes = %.4f of zlib6 payload)"
          % (bits, bits / max(n, 1), bits / 8, bits / 8 / ref6))


if __name__ == "__main__":
    main()
