#!/usr/bin/env python3
"""cs_decode.py - an independent reader of changestream archives.

Written from docs/FORMAT.md alone (format version 1), with the Python 3
standard library only, to check that the specification is enough to read an
archive without changestream's code.

    cs_decode.py SEGMENT.wal|SEGMENT.wal.gz    print every entry
    cs_decode.py GENERATION_DIR                 every segment, in index order
    cs_decode.py --summary PATH                 counts and positions only
    cs_decode.py --values PATH                  also print tuple values

A GENERATION_DIR is <changestream.directory>/generations/<16 hex digits>;
a path to its wal/ subdirectory works too.

Every segment header CRC and frame CRC is checked (CRC-32C, Castagnoli,
reflected polynomial 0x82F63B78), every frame must be exactly filled by its
entries, and every pgoutput message (protocol version 1) is parsed to its
last byte.  Reading a segment stops at the first frame that does not
validate: that is a torn tail, legal only at the end of the newest raw
(*.wal) segment of a generation.

Exit status: 0 when everything validates (a torn tail or an incomplete
final transaction in the newest raw segment is reported, not an error);
1 when anything else is damaged or inconsistent; 2 on usage errors.
"""

import argparse
import datetime
import gzip
import os
import re
import struct
import sys
import zlib

# ---------------------------------------------------------------- constants

FORMAT_VERSION = 1
SEGMENT_MAGIC = b"CSTRMWAL"
SEGMENT_HEADER_SIZE = 64
FRAME_MAGIC = b"CSFR"
FRAME_HEADER_SIZE = 12
ENTRY_HEADER_SIZE = 29
MAX_FRAME_BODY = 1024 * 1024 * 1024

ENTRY_KINDS = {"w": "message", "s": "preamble", "k": "position"}

PG_EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)

SEGMENT_NAME = re.compile(r"^([0-9a-f]{16})\.wal(\.gz)?$")
GENERATION_NAME = re.compile(r"^[0-9a-f]{16}$")

# ---------------------------------------------------------------- CRC-32C


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(*chunks):
    """CRC-32C of the concatenation of chunks: init ~0, reflected, final ~."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for data in chunks:
        for b in data:
            crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283, "CRC-32C check value"

# ---------------------------------------------------------------- helpers


class Damaged(Exception):
    """Bytes that must validate do not."""


def lsn(v):
    return "%X/%X" % (v >> 32, v & 0xFFFFFFFF)


def pgtime(us):
    if us == 0:
        return "0"
    try:
        return (PG_EPOCH + datetime.timedelta(microseconds=us)).strftime(
            "%Y-%m-%d %H:%M:%S.%f+00")
    except OverflowError:
        return "(%d us)" % us


class Buf:
    """A cursor over one pgoutput message; every read is bounds-checked."""

    def __init__(self, data):
        self.data = data
        self.pos = 0

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise Damaged("pgoutput message too short (wanted %d bytes at %d of %d)"
                          % (n, self.pos, len(self.data)))
        v = self.data[self.pos:self.pos + n]
        self.pos += n
        return v

    def u8(self):
        return self.take(1)[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def u32(self):
        return struct.unpack(">I", self.take(4))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def u64(self):
        return struct.unpack(">Q", self.take(8))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def cstring(self):
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise Damaged("unterminated string in pgoutput message")
        s = self.data[self.pos:end].decode("utf-8", "replace")
        self.pos = end + 1
        return s

    def done(self):
        if self.pos != len(self.data):
            raise Damaged("pgoutput message has %d trailing bytes"
                          % (len(self.data) - self.pos))

# ---------------------------------------------------------------- pgoutput v1


def tuple_data(b):
    """TupleData: Int16 ncols, then per column 'n' | 'u' | 't' Int32 len bytes."""
    n = b.i16()
    cols = []
    for _ in range(n):
        k = chr(b.u8())
        if k == "n":
            cols.append(None)
        elif k == "u":
            cols.append("(unchanged toast)")
        elif k in ("t", "b"):
            ln = b.i32()
            v = b.take(ln)
            cols.append(v.decode("utf-8", "replace") if k == "t" else "\\x" + v.hex())
        else:
            raise Damaged("unknown TupleData column kind %r" % k)
    return cols


def parse_pgoutput(data):
    """Parse one pgoutput protocol version 1 message completely.
    Returns a dict with at least 'type'."""
    if not data:
        raise Damaged("empty pgoutput message")
    b = Buf(data)
    t = chr(b.u8())
    m = {"type": t}
    if t == "B":
        m["final_lsn"] = b.u64()
        m["commit_time"] = b.i64()
        m["xid"] = b.u32()
        m["brief"] = "final_lsn %s xid %d" % (lsn(m["final_lsn"]), m["xid"])
    elif t == "C":
        m["flags"] = b.u8()
        m["commit_lsn"] = b.u64()
        m["end_lsn"] = b.u64()
        m["commit_time"] = b.i64()
        m["brief"] = "commit_lsn %s end_lsn %s at %s" % (
            lsn(m["commit_lsn"]), lsn(m["end_lsn"]), pgtime(m["commit_time"]))
    elif t == "O":
        m["origin_lsn"] = b.u64()
        m["origin"] = b.cstring()
        m["brief"] = "origin %s at %s" % (m["origin"], lsn(m["origin_lsn"]))
    elif t == "R":
        m["oid"] = b.u32()
        m["nspname"] = b.cstring()
        m["relname"] = b.cstring()
        m["replident"] = chr(b.u8())
        ncols = b.i16()
        cols = []
        for _ in range(ncols):
            flags = b.u8()
            name = b.cstring()
            typoid = b.u32()
            typmod = b.i32()
            cols.append((name, typoid, typmod, flags))
        m["columns"] = cols
        m["brief"] = "oid %d %s.%s replident %s columns %s" % (
            m["oid"], m["nspname"], m["relname"], m["replident"],
            ",".join("%s%s:%d" % ("*" if f & 1 else "", n, o) for n, o, _, f in cols))
    elif t == "Y":
        m["oid"] = b.u32()
        m["nspname"] = b.cstring()
        m["typname"] = b.cstring()
        m["brief"] = "oid %d %s.%s" % (m["oid"], m["nspname"], m["typname"])
    elif t == "I":
        m["relid"] = b.u32()
        if chr(b.u8()) != "N":
            raise Damaged("Insert without 'N' tuple")
        m["new"] = tuple_data(b)
        m["brief"] = "relid %d" % m["relid"]
    elif t == "U":
        m["relid"] = b.u32()
        k = chr(b.u8())
        if k in ("K", "O"):
            m["old_kind"] = k
            m["old"] = tuple_data(b)
            k = chr(b.u8())
        if k != "N":
            raise Damaged("Update without 'N' tuple")
        m["new"] = tuple_data(b)
        m["brief"] = "relid %d%s" % (m["relid"], " old %s" % m["old_kind"] if "old" in m else "")
    elif t == "D":
        m["relid"] = b.u32()
        k = chr(b.u8())
        if k not in ("K", "O"):
            raise Damaged("Delete without 'K' or 'O' tuple")
        m["old_kind"] = k
        m["old"] = tuple_data(b)
        m["brief"] = "relid %d old %s" % (m["relid"], k)
    elif t == "T":
        n = b.i32()
        m["options"] = b.u8()
        m["relids"] = [b.u32() for _ in range(n)]
        m["brief"] = "options %d relids %s" % (m["options"], m["relids"])
    elif t == "M":
        m["flags"] = b.u8()
        m["transactional"] = bool(m["flags"] & 1)
        m["lsn"] = b.u64()
        m["prefix"] = b.cstring()
        ln = b.i32()
        m["content"] = b.take(ln)
        m["brief"] = "%s lsn %s prefix %r content %d bytes" % (
            "transactional" if m["transactional"] else "non-transactional",
            lsn(m["lsn"]), m["prefix"], ln)
    else:
        raise Damaged("unknown pgoutput message type %r" % t)
    b.done()
    return m

# ---------------------------------------------------------------- segments


def read_segment_bytes(path):
    """The uncompressed bytes of a segment, and None or the reason the gzip
    stream could not be read to its end (what was decoded up to the damage
    is returned, so the damage shows as a torn tail, as with zlib's
    gzread)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        # a raw segment compressed (and removed) since it was listed
        if not path.endswith(".wal"):
            raise
        with open(path + ".gz", "rb") as f:
            raw = f.read()
    if raw[:2] != b"\x1f\x8b":
        return raw, None          # a raw segment (starts with CSTRMWAL)
    out = []
    pos = 0
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            while pos < len(raw) and not d.eof:
                chunk = raw[pos:pos + 1024]
                pos += len(chunk)
                out.append(d.decompress(chunk))
                if d.eof:
                    pos -= len(d.unused_data)
        except zlib.error as e:
            return b"".join(out), "gzip error: %s" % e
        if not d.eof:
            return b"".join(out), "gzip stream ends early"
        # concatenated members are legal gzip (zlib's gzread reads them)
        if pos >= len(raw):
            return b"".join(out), None


def decode_header(buf):
    if len(buf) < SEGMENT_HEADER_SIZE:
        raise Damaged("shorter than the %d-byte segment header" % SEGMENT_HEADER_SIZE)
    h = buf[:SEGMENT_HEADER_SIZE]
    if h[0:8] != SEGMENT_MAGIC:
        raise Damaged("bad segment magic %r" % h[0:8])
    (crc,) = struct.unpack(">I", h[60:64])
    if crc32c(h[0:60]) != crc:
        raise Damaged("segment header CRC mismatch")
    version, hsize = struct.unpack(">II", h[8:16])
    if version < 1 or version > FORMAT_VERSION:
        raise Damaged("unknown format version %d" % version)
    if hsize != SEGMENT_HEADER_SIZE:
        raise Damaged("header size %d, expected %d" % (hsize, SEGMENT_HEADER_SIZE))
    sysid, gen, index, start = struct.unpack(">QQQQ", h[16:48])
    (tli,) = struct.unpack(">I", h[48:52])
    return {"version": version, "system_identifier": sysid, "generation": gen,
            "segment_index": index, "start_lsn": start, "timeline": tli,
            "reserved": h[52:60], "crc": crc}


def iter_frames(buf):
    """Yield (offset, body) for each valid frame; return (valid_end, torn
    reason or None) via StopIteration.value."""
    off = SEGMENT_HEADER_SIZE
    while True:
        if off == len(buf):
            return off, None
        if off + FRAME_HEADER_SIZE > len(buf):
            return off, "partial frame header (%d bytes)" % (len(buf) - off)
        fh = buf[off:off + FRAME_HEADER_SIZE]
        if fh[0:4] != FRAME_MAGIC:
            return off, "bad frame magic %s" % fh[0:4].hex()
        blen, crc = struct.unpack(">II", fh[4:12])
        if blen == 0 or blen > MAX_FRAME_BODY:
            return off, "bad frame body length %d" % blen
        if off + FRAME_HEADER_SIZE + blen > len(buf):
            return off, "frame body truncated (%d of %d bytes)" % (
                len(buf) - off - FRAME_HEADER_SIZE, blen)
        body = buf[off + FRAME_HEADER_SIZE:off + FRAME_HEADER_SIZE + blen]
        if crc32c(fh[4:8], body) != crc:
            return off, "frame CRC mismatch"
        entries = split_entries(body)
        if entries is None:
            return off, "frame entries do not exactly fill the body"
        yield off, entries
        off += FRAME_HEADER_SIZE + blen


def split_entries(body):
    out = []
    pos = 0
    while pos < len(body):
        if pos + ENTRY_HEADER_SIZE > len(body):
            return None
        kind = chr(body[pos])
        ln, ds, we, st = struct.unpack(">IQQq", body[pos + 1:pos + ENTRY_HEADER_SIZE])
        if ln > len(body) - pos - ENTRY_HEADER_SIZE:
            return None
        data = body[pos + ENTRY_HEADER_SIZE:pos + ENTRY_HEADER_SIZE + ln]
        out.append((pos, kind, ds, we, st, data))
        pos += ENTRY_HEADER_SIZE + ln
    return out


class SegmentResult:
    def __init__(self, path):
        self.path = path
        self.header = None
        self.frames = 0
        self.entries = 0
        self.kinds = {}
        self.types = {}           # pgoutput type -> count, 'w' entries only
        self.preamble_types = {}  # pgoutput type -> count, 's' entries
        self.transactions = 0
        self.first_commit = None
        self.last_commit = None
        self.position = None      # position of record at the safe end
        self.safe_offset = None   # (frame offset, entry end offset in body)
        self.valid_end = None
        self.size = None
        self.torn = None
        self.open_txn = None      # final_lsn of an incomplete trailing txn
        self.unknown_kinds = 0
        self.problems = []


def read_segment(path, out, show_entries, show_values, state):
    """Decode one segment.  state carries transaction state across the
    segments of a generation (only for consistency checks)."""
    r = SegmentResult(path)
    buf, gz_problem = read_segment_bytes(path)
    r.size = len(buf)
    try:
        r.header = decode_header(buf)
    except Damaged as e:
        r.problems.append("header: %s" % e)
        if gz_problem:
            r.problems.append(gz_problem)
        return r
    h = r.header
    if h["reserved"] != b"\0" * 8:
        r.problems.append("reserved header bytes 52..59 are not zero")
    if out:
        print("segment %s" % path)
        print("  header: version %d, system_identifier %d, generation %016x, "
              "index %d, start_lsn %s, timeline %d, crc %08x"
              % (h["version"], h["system_identifier"], h["generation"],
                 h["segment_index"], lsn(h["start_lsn"]), h["timeline"], h["crc"]))
    position = h["start_lsn"]
    in_txn = False
    txn_final = None
    gen = iter_frames(buf)
    while True:
        try:
            foff, entries = next(gen)
        except StopIteration as stop:
            r.valid_end, r.torn = stop.value
            break
        r.frames += 1
        if show_entries:
            blen = sum(ENTRY_HEADER_SIZE + len(e[5]) for e in entries)
            print("  frame @%d: %d bytes, %d entries" % (foff, blen, len(entries)))
        for (eoff, kind, ds, we, st, data) in entries:
            r.entries += 1
            r.kinds[kind] = r.kinds.get(kind, 0) + 1
            m = None
            if kind in ("w", "s"):
                try:
                    m = parse_pgoutput(data)
                except Damaged as e:
                    r.problems.append("entry at frame %d + %d: %s" % (foff, eoff, e))
                    m = {"type": chr(data[0]) if data else "?", "brief": "MALFORMED"}
            if kind == "s":
                r.preamble_types[m["type"]] = r.preamble_types.get(m["type"], 0) + 1
                if m["type"] not in ("R", "Y"):
                    r.problems.append("preamble entry of type %r" % m["type"])
                if in_txn:
                    r.problems.append("preamble entry inside a transaction")
            elif kind == "w":
                t = m["type"]
                r.types[t] = r.types.get(t, 0) + 1
                if t == "B":
                    if in_txn:
                        r.problems.append("BEGIN inside a transaction at frame %d" % foff)
                    in_txn = True
                    txn_final = m.get("final_lsn")
                elif t == "C":
                    if not in_txn:
                        r.problems.append("COMMIT outside a transaction at frame %d" % foff)
                    elif "commit_lsn" in m and m["commit_lsn"] != txn_final:
                        r.problems.append("COMMIT lsn %s differs from BEGIN final_lsn %s"
                                          % (lsn(m["commit_lsn"]), lsn(txn_final)))
                    in_txn = False
                    if "commit_lsn" in m:
                        r.transactions += 1
                        if r.first_commit is None:
                            r.first_commit = m["commit_lsn"]
                        if r.last_commit is not None and m["commit_lsn"] <= r.last_commit:
                            r.problems.append("commit LSN %s not after %s"
                                              % (lsn(m["commit_lsn"]), lsn(r.last_commit)))
                        if state.get("last_commit") is not None and \
                                m["commit_lsn"] <= state["last_commit"]:
                            r.problems.append("commit LSN %s repeats or goes back (generation)"
                                              % lsn(m["commit_lsn"]))
                        state["last_commit"] = m["commit_lsn"]
                        r.last_commit = m["commit_lsn"]
                        position = max(position, m["end_lsn"])
                elif t in ("I", "U", "D", "T", "R", "Y") and not in_txn:
                    r.problems.append("%s message outside a transaction" % t)
                elif t == "M" and m.get("transactional") and not in_txn:
                    r.problems.append("transactional message outside a transaction")
            elif kind == "k":
                if data:
                    r.problems.append("position entry with %d data bytes" % len(data))
                if not in_txn:
                    position = max(position, we)
                else:
                    r.problems.append("position entry inside a transaction")
            else:
                r.unknown_kinds += 1
            if not in_txn:
                r.safe_offset = (foff, eoff)
            if show_entries:
                line = "    %s %-8s dataStart %-11s walEnd %-11s sent %s" % (
                    kind, ENTRY_KINDS.get(kind, "UNKNOWN"), lsn(ds), lsn(we), pgtime(st))
                if m is not None:
                    line += " | %s len %d | %s" % (m["type"], len(data), m.get("brief", ""))
                else:
                    line += " | len %d" % len(data)
                print(line)
                if show_values and m is not None:
                    for key in ("old", "new"):
                        if key in m:
                            print("        %s: %r" % (key, m[key]))
                    if m.get("type") == "M":
                        print("        content: %r" % m["content"])
    r.position = position
    r.open_txn = txn_final if in_txn else None
    if gz_problem and not r.torn:
        r.torn = gz_problem
    return r


def segment_files(wal_dir):
    """{index: path}, the .gz preferred when a raw twin still exists."""
    files = {}
    for name in sorted(os.listdir(wal_dir)):
        mo = SEGMENT_NAME.match(name)
        if not mo:
            continue
        idx = int(mo.group(1), 16)
        if mo.group(2) or idx not in files:
            files[idx] = os.path.join(wal_dir, name)
    return dict(sorted(files.items()))


def read_identity(gen_dir):
    ident = {}
    path = os.path.join(gen_dir, "generation")
    try:
        with open(path, "r", encoding="utf-8") as f:
            for line in f:
                line = line.rstrip("\r\n")
                if line.startswith("#") or " = " not in line:
                    continue
                k, v = line.split(" = ", 1)
                ident[k] = v
    except FileNotFoundError:
        return None
    return ident


def parse_lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)

# ---------------------------------------------------------------- main


def summarize(title, results, problems):
    types = {}
    kinds = {}
    pre = {}
    tx = 0
    first = last = None
    for r in results:
        for t, n in r.types.items():
            types[t] = types.get(t, 0) + n
        for k, n in r.kinds.items():
            kinds[k] = kinds.get(k, 0) + n
        for t, n in r.preamble_types.items():
            pre[t] = pre.get(t, 0) + n
        tx += r.transactions
        if r.first_commit is not None and first is None:
            first = r.first_commit
        if r.last_commit is not None:
            last = r.last_commit
    print(title)
    print("  segments: %d, frames: %d, entries: %d (%s)" % (
        len(results), sum(r.frames for r in results), sum(r.entries for r in results),
        ", ".join("%s=%d" % kv for kv in sorted(kinds.items()))))
    print("  pgoutput messages ('w' entries) by type:")
    for t in sorted(types):
        print("    %s %d" % (t, types[t]))
    print("  preamble ('s' entries) by type: %s" %
          (", ".join("%s=%d" % kv for kv in sorted(pre.items())) or "none"))
    print("  transactions (complete): %d" % tx)
    print("  first commit LSN: %s" % (lsn(first) if first is not None else "-"))
    print("  last commit LSN: %s" % (lsn(last) if last is not None else "-"))
    if results and results[-1].position is not None:
        print("  position of record: %s" % lsn(results[-1].position))
    for r in results:
        if r.torn:
            print("  torn tail: %s at offset %d of %d: %s" % (
                os.path.basename(r.path), r.valid_end, r.size, r.torn))
        if r.open_txn is not None:
            print("  incomplete final transaction (final_lsn %s) in %s" % (
                lsn(r.open_txn), os.path.basename(r.path)))
        if r.unknown_kinds:
            print("  %d entries of unknown kind ignored in %s" % (
                r.unknown_kinds, os.path.basename(r.path)))
    if problems:
        print("  PROBLEMS:")
        for p in problems:
            print("    " + p)
    else:
        print("  all CRCs and messages valid")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="a .wal or .wal.gz segment, or a generation directory")
    ap.add_argument("--summary", action="store_true", help="counts and positions only")
    ap.add_argument("--values", action="store_true", help="print tuple values too")
    args = ap.parse_args()

    path = args.path.rstrip("/")
    problems = []
    state = {}
    results = []
    show = not args.summary

    if os.path.isdir(path):
        gen_dir = path
        if os.path.basename(path) == "wal":
            gen_dir = os.path.dirname(path)
        wal_dir = os.path.join(gen_dir, "wal")
        if not os.path.isdir(wal_dir):
            print("%s: no wal/ directory: not a generation" % path, file=sys.stderr)
            return 2
        gen_name = os.path.basename(os.path.abspath(gen_dir))
        ident = read_identity(gen_dir)
        if ident is None:
            problems.append("no identity file")
        else:
            for key in ("format_version", "generation", "system_identifier",
                        "timeline", "start_lsn"):
                if key not in ident:
                    problems.append("identity file lacks required key %s" % key)
            if GENERATION_NAME.match(gen_name) and ident.get("generation") != gen_name:
                problems.append("identity generation %s differs from directory %s"
                                % (ident.get("generation"), gen_name))
            elif not GENERATION_NAME.match(gen_name) and "generation" in ident:
                gen_name = ident["generation"]   # a renamed copy
            if show:
                print("generation %s" % gen_name)
                for k, v in ident.items():
                    print("  %s = %s" % (k, v))
        files = segment_files(wal_dir)
        horizon = read_horizon(gen_dir, problems)
        first_index = 0
        if horizon is not None:
            # below the retention horizon: being deleted, ignored (FORMAT.md 4.3)
            first_index = horizon["first_segment"]
            files = dict((i, f) for i, f in files.items() if i >= first_index)
        indexes = list(files)
        if indexes and indexes[0] != first_index:
            problems.append("%s: offset 0: the segments start at %d, not at %d"
                            % (os.path.basename(files[indexes[0]]), indexes[0], first_index))
        expected_start = None
        if ident and "start_lsn" in ident and horizon is None:
            expected_start = parse_lsn(ident["start_lsn"])
        for n, idx in enumerate(indexes):
            p = files[idx]
            newest = n == len(indexes) - 1
            r = read_segment(p, show, show, args.values, state)
            results.append(r)
            name = os.path.basename(p)
            problems.extend("%s: %s" % (name, x) for x in r.problems)
            if r.header is None:
                continue
            h = r.header
            if h["segment_index"] != idx:
                problems.append("%s: header index %d" % (name, h["segment_index"]))
            if "%016x" % h["generation"] != gen_name:
                problems.append("%s: header generation %016x" % (name, h["generation"]))
            if ident:
                if str(h["system_identifier"]) != ident.get("system_identifier"):
                    problems.append("%s: system identifier differs from identity" % name)
                if str(h["timeline"]) != ident.get("timeline"):
                    problems.append("%s: timeline differs from identity" % name)
            if n > 0 and indexes[n - 1] != idx - 1:
                problems.append("%s: gap in segment indexes after %d" % (name, indexes[n - 1]))
            if expected_start is not None and h["start_lsn"] != expected_start:
                problems.append("%s: start_lsn %s, but the previous segment ends at %s"
                                % (name, lsn(h["start_lsn"]), lsn(expected_start)))
            if n == 0 and horizon is not None and h["start_lsn"] > horizon["snapshot_lsn"]:
                problems.append("%s: offset 0: starts at %s, after the retention horizon's snapshot %s"
                                % (name, lsn(h["start_lsn"]), lsn(horizon["snapshot_lsn"])))
            expected_start = r.position
            sealed = not newest or p.endswith(".gz")
            if r.torn and sealed:
                problems.append("%s: sealed segment damaged at offset %d: %s"
                                % (name, r.valid_end, r.torn))
            if r.open_txn is not None and sealed:
                problems.append("%s: sealed segment ends inside a transaction" % name)
        if horizon is not None:
            problems.extend(check_snapshots(gen_dir, horizon["snapshot_lsn"], True))
        else:
            problems.extend(check_snapshots(gen_dir, parse_lsn(ident["start_lsn"])
                                            if ident and "start_lsn" in ident else None))
        title = "generation %s" % gen_name
    else:
        r = read_segment(path, show, show, args.values, state)
        results.append(r)
        problems.extend(r.problems)
        if r.torn and path.endswith(".gz"):
            problems.append("compressed (sealed) segment damaged at offset %d: %s"
                            % (r.valid_end, r.torn))
        title = "segment %s" % path

    if show:
        print()
    summarize(title, results, problems)
    return 1 if problems else 0


# ---------------------------------------------------------------- snapshots
# The snapshot checks of changestream.verify() (docs/DESIGN.md section 10):
# the whole gzip stream, the manifest, the tables and rows it announces
# against the COPY sections and rows really there, the file name's LSN, and
# a snapshot at the generation's start.  Returns problems as
# "<file>: offset <N>: <problem>" (offset in the decompressed stream).

def check_snapshot_file(path):
    import json
    name = os.path.basename(path)
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        return ["%s: offset 0: the gzip stream cannot be decompressed: %s" % (name, e)]
    lines = data.split(b"\n")
    keys = {}
    i = 0
    while i < len(lines) and lines[i] != b"-- end of manifest":
        line = lines[i].decode("utf-8", "replace")
        for key in ("lsn", "tables", "rows", "manifest"):
            if line.startswith("-- %s: " % key):
                keys[key] = line[len(key) + 5:]
        i += 1
    if i == len(lines) or set(keys) != {"lsn", "tables", "rows", "manifest"}:
        return ["%s: offset 0: the snapshot does not begin with a valid manifest" % name]
    try:
        manifest = json.loads(keys["manifest"])
        json_rows = sum(int(t["rows"]) for t in manifest["tables"])
        json_tables = len(manifest["tables"])
    except (ValueError, KeyError, TypeError) as e:
        return ["%s: offset 0: the manifest's JSON is not valid: %s" % (name, e)]
    sections = rows = 0
    in_section = False
    offset = sum(len(x) + 1 for x in lines[:i + 1])
    for line in lines[i + 1:]:
        if in_section:
            if line == b"\\.":
                in_section = False
            else:
                rows += 1
        elif line.startswith(b"COPY ") and line.endswith(b" FROM stdin;"):
            sections += 1
            in_section = True
        elif line != b"":
            return ["%s: offset %d: a table section does not start with a COPY line" % (name, offset)]
        offset += len(line) + 1
    problems = []
    if in_section:
        problems.append("%s: offset %d: the file ends inside a table section" % (name, len(data)))
    if name.split(".")[0] != "%016X" % parse_lsn(keys["lsn"]):
        problems.append("%s: offset 0: the file name's LSN is not the manifest's %s" % (name, keys["lsn"]))
    if not (sections == int(keys["tables"]) == json_tables):
        problems.append("%s: offset 0: the manifest announces %s tables (JSON: %d), the file holds %d"
                        % (name, keys["tables"], json_tables, sections))
    if not (rows == int(keys["rows"]) == json_rows):
        problems.append("%s: offset 0: the manifest announces %s rows (JSON: %d), the file holds %d"
                        % (name, keys["rows"], json_rows, rows))
    return problems


def check_snapshots(gen_dir, start_lsn, horizon=False):
    snap_dir = os.path.join(gen_dir, "snapshots")
    names = sorted(n for n in os.listdir(snap_dir) if re.match(r"^[0-9A-F]{16}\.snapshot\.gz$", n)) \
        if os.path.isdir(snap_dir) else []
    if horizon:
        names = [n for n in names if int(n[:16], 16) >= start_lsn]
    problems = []
    for n in names:
        problems.extend(check_snapshot_file(os.path.join(snap_dir, n)))
    if start_lsn is not None and "%016X.snapshot.gz" % start_lsn not in names:
        problems.append("snapshots: offset 0: no snapshot at the generation's %s %s"
                        % ("retention horizon" if horizon else "start", lsn(start_lsn)))
    return problems


# The retention horizon (docs/FORMAT.md section 4.3), or None without one.
def read_horizon(gen_dir, problems):
    path = os.path.join(gen_dir, "retention")
    if not os.path.exists(path):
        return None
    keys = {}
    with open(path, "rb") as f:
        for line in f.read().decode("utf-8", "replace").split("\n"):
            if line.startswith("#") or " = " not in line:
                continue
            k, v = line.split(" = ", 1)
            keys[k] = v
    try:
        return {"first_segment": int(keys["first_segment"]),
                "snapshot_lsn": parse_lsn(keys["snapshot_lsn"]),
                "snapshot_time_us": int(keys["snapshot_time_us"])}
    except (KeyError, ValueError):
        problems.append("retention: offset 0: the retention horizon lacks first_segment, "
                        "snapshot_lsn or snapshot_time_us")
        return None


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(0)
