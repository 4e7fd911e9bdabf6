#!/usr/bin/env python3
"""cs_decode.py - an independent reader of changestream archives.

Written from docs/FORMAT.md alone (format versions 1, 2 and 3), with the Python 3
standard library only, to check that the specification is enough to read an
archive without changestream's code.

    cs_decode.py SEGMENT.wal|SEGMENT.wal.gz    print every entry
    cs_decode.py GENERATION_DIR                 every segment, in index order
    cs_decode.py ARCHIVE_DIR                    every generation
    cs_decode.py --summary PATH                 counts and positions only
    cs_decode.py --values PATH                  also print tuple values

A GENERATION_DIR is <changestream.directory>/generations/<16 hex digits>;
a path to its wal/ subdirectory works too.  An ARCHIVE_DIR is the
changestream.directory itself (it holds generations/, and databases/ with
one archive tree per database other than changestream.database: every
tree is read, each generation titled with its database), or one
database's tree, <changestream.directory>/databases/<name>.

Every segment header CRC and frame CRC is checked (CRC-32C, Castagnoli,
reflected polynomial 0x82F63B78), every frame must be exactly filled by its
entries, and every pgoutput message (protocol version 1) is parsed to its
last byte.  A frame that does not validate is a torn tail only when it is
the last frame of the newest raw (*.wal) segment of a generation, i.e. no
valid frame follows it; anywhere else it is damage.  A generation's
segments must be continuous (docs/FORMAT.md section 11): indexes 0..n
without a gap, header index and generation equal to the file name and the
directory, each start_lsn equal to the previous segment's position of
record, commit LSNs strictly increasing and positions never going back.
Files are opened with O_NONBLOCK and must be regular files (fstat), so a
FIFO or device never blocks the reader.

Each damage is printed on stderr as '<file>: offset <N>: <problem>'
(N = byte offset in the uncompressed segment; 0 for a header or a whole
file).  Exit status: 0 when everything validates (a torn tail or an
incomplete final transaction in the newest raw segment is reported on
stdout, not an error); 1 when anything is damaged or inconsistent; 2 on
usage errors; 3 on an internal error of this script (a bug).
"""

import argparse
import datetime
import gzip
import os
import re
import stat
import struct
import sys
import zlib

# ---------------------------------------------------------------- constants

FORMAT_VERSION = 3
SEGMENT_MAGIC = b"CSTRMWAL"
SEGMENT_HEADER_SIZE = 64          # the part every version shares
HEADER_SIZES = {1: 64, 2: 128, 3: 128}  # header size by format version
SEAL_OFFSET = 64                  # versions 2, 3: the seal area, 64 bytes
FRAME_MAGIC = b"CSFR"
FRAME_HEADER_SIZE = 12
ENTRY_HEADER_SIZE = 29
MAX_FRAME_BODY = 1024 * 1024 * 1024

ENTRY_KINDS = {"w": "message", "W": "message", "s": "preamble", "k": "position"}
BEGIN_KINDS = {"b": "w", "c": "W"}  # version 3: kind of the base fields
MASK64 = 0xFFFFFFFFFFFFFFFF

PG_EPOCH = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)

SEGMENT_NAME = re.compile(r"^([0-9a-f]{16})\.wal(\.gz)?$")
GENERATION_NAME = re.compile(r"^[0-9a-f]{16}$")
SNAPSHOT_NAME = re.compile(r"^[0-9A-F]{16}\.snapshot\.gz$")

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

    def u16(self):
        return struct.unpack(">H", self.take(2))[0]

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
    """TupleData: Int16 ncols (unsigned, as PostgreSQL reads it), then per
    column 'n' | 'u' | 't' Int32 len bytes."""
    n = b.u16()
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
        ncols = b.u16()
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
        n = b.u32()
        m["options"] = b.u8()
        if n > (len(data) - b.pos) // 4:
            raise Damaged("Truncate names %d relations, more than the message holds" % n)
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

# ---------------------------------------------------------------- problems


class Problems:
    """Every damage found, as (file, offset, text), printed on stderr as
    '<file>: offset <N>: <text>' (docs/FORMAT.md section 11.6)."""

    def __init__(self):
        self.items = []

    def add(self, path, offset, text):
        self.items.append((path, offset, text))

    def __len__(self):
        return len(self.items)

    def print(self, stream):
        for path, offset, text in self.items:
            print("%s: offset %d: %s" % (path, offset, text), file=stream)


class FileProblem(Exception):
    """A file that cannot be read as a file of the archive at all."""

    def __init__(self, offset, text):
        super().__init__(text)
        self.offset = offset
        self.text = text


def read_regular_file(path):
    """The bytes of path, which must be a regular file (a symbolic link to
    one is followed).  Opened with O_NONBLOCK and checked with fstat before
    anything is read, so a FIFO, socket or device never blocks the reader."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise FileProblem(0, "could not open file: %s" % e.strerror)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise FileProblem(0, "\"%s\" is not a regular file" % path)
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as e:
        raise FileProblem(0, "could not read file: %s" % e.strerror)
    finally:
        os.close(fd)

# ---------------------------------------------------------------- segments


def read_segment_bytes(path):
    """(path actually read, uncompressed bytes, None or (offset, reason) when
    the gzip stream could not be read to its end).  What was decoded up to
    the gzip damage is returned, as zlib's gzread gives it."""
    try:
        raw = read_regular_file(path)
    except FileProblem as e:
        # a raw segment compressed (and removed) since it was listed
        if path.endswith(".wal") and not os.path.lexists(path) \
                and os.path.lexists(path + ".gz"):
            path = path + ".gz"
            raw = read_regular_file(path)
        else:
            raise e
    if raw[:2] != b"\x1f\x8b":
        return path, raw, None          # a raw segment (starts with CSTRMWAL)
    out = []
    outlen = 0
    pos = 0
    while True:
        d = zlib.decompressobj(wbits=31)
        try:
            while pos < len(raw) and not d.eof:
                chunk = raw[pos:pos + 65536]
                pos += len(chunk)
                piece = d.decompress(chunk)
                out.append(piece)
                outlen += len(piece)
                if d.eof:
                    pos -= len(d.unused_data)
        except zlib.error as e:
            return path, b"".join(out), (outlen, "gzip error: %s" % e)
        if not d.eof:
            return path, b"".join(out), (outlen, "gzip stream ends early")
        # a segment file is one gzip member and nothing after it
        # (docs/FORMAT.md section 5.2): zlib's gzread would skip bytes
        # that do not start a member, but they are not what was written
        if pos >= len(raw):
            return path, b"".join(out), None
        return path, b"".join(out), (outlen, "%d bytes follow the gzip member" % (len(raw) - pos))


def decode_header(buf):
    if len(buf) < SEGMENT_HEADER_SIZE:
        raise Damaged("shorter than the %d-byte segment header (%d bytes)"
                      % (SEGMENT_HEADER_SIZE, len(buf)))
    h = buf[:SEGMENT_HEADER_SIZE]
    if h[0:8] != SEGMENT_MAGIC:
        raise Damaged("bad segment magic %s" % h[0:8].hex())
    (crc,) = struct.unpack(">I", h[60:64])
    if crc32c(h[0:60]) != crc:
        raise Damaged("segment header CRC mismatch")
    version, hsize = struct.unpack(">II", h[8:16])
    if version < 1 or version > FORMAT_VERSION:
        raise Damaged("unknown format version %d" % version)
    if hsize != HEADER_SIZES[version]:
        raise Damaged("header size %d, expected %d for version %d"
                      % (hsize, HEADER_SIZES[version], version))
    if len(buf) < hsize:
        raise Damaged("shorter than the %d-byte segment header (%d bytes)" % (hsize, len(buf)))
    sysid, gen, index, start = struct.unpack(">QQQQ", h[16:48])
    (tli,) = struct.unpack(">I", h[48:52])
    out = {"version": version, "header_size": hsize, "system_identifier": sysid,
           "generation": gen, "segment_index": index, "start_lsn": start,
           "timeline": tli, "reserved": h[52:60], "crc": crc, "seal": None,
           "seal_state": "none"}
    if version >= 2:
        area = buf[SEAL_OFFSET:SEAL_OFFSET + 64]
        if area != b"\0" * 64:
            (scrc,) = struct.unpack(">I", area[60:64])
            if crc32c(area[0:60]) != scrc:
                out["seal_state"] = "bad"
            else:
                end, first, last, tmin, tmax, ntx = struct.unpack(">QQQqqQ", area[0:48])
                out["seal_state"] = "valid"
                out["seal"] = {"end_lsn": end, "first_commit": first, "last_commit": last,
                               "min_time": tmin, "max_time": tmax, "transactions": ntx,
                               "reserved": area[48:60]}
    return out


def check_frame(buf, off, version):
    """(body length, None) when a valid frame starts at off, else
    (None, reason).  Every length is compared with the bytes really there
    before anything is sliced."""
    if off + FRAME_HEADER_SIZE > len(buf):
        return None, "partial frame header (%d bytes)" % (len(buf) - off)
    fh = buf[off:off + FRAME_HEADER_SIZE]
    if fh[0:4] != FRAME_MAGIC:
        return None, "bad frame magic %s" % fh[0:4].hex()
    blen, crc = struct.unpack(">II", fh[4:12])
    if blen == 0 or blen > MAX_FRAME_BODY:
        return None, "bad frame body length %d" % blen
    if blen > len(buf) - off - FRAME_HEADER_SIZE:
        return None, "frame body length %d runs past the end of the file (%d bytes there)" % (
            blen, len(buf) - off - FRAME_HEADER_SIZE)
    body = buf[off + FRAME_HEADER_SIZE:off + FRAME_HEADER_SIZE + blen]
    if crc32c(fh[4:8], body) != crc:
        return None, "frame CRC mismatch"
    if split_entries(body, version) is None:
        return None, "frame entries do not exactly fill the body"
    return blen, None


def valid_frame_after(buf, off, version):
    """Offset of the first valid frame that starts after off, or None: a bad
    frame is a torn tail only when nothing valid follows it."""
    pos = off + 1
    while True:
        pos = buf.find(FRAME_MAGIC, pos)
        if pos < 0:
            return None
        blen, _ = check_frame(buf, pos, version)
        if blen is not None:
            return pos
        pos += 1


def varint(body, pos, end):
    """(value, next position) of the unsigned LEB128 varint at pos, or None
    when it runs past end, is longer than 10 bytes or does not fit in 64
    bits."""
    v = 0
    shift = 0
    while pos < end and shift < 70:
        b = body[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if v >> 64:
            return None
        if not b & 0x80:
            return v, pos
        shift += 7
    return None


def svarint(body, pos, end):
    r = varint(body, pos, end)
    if r is None:
        return None
    u, pos = r
    return (u >> 1) ^ -(u & 1), pos


def split_entries(body, version):
    """[(offset, kind, dataStart, walEnd, send time, data)] of a frame body,
    or None when the entries do not exactly fill it (versions 2, 3: its
    three sections).  The offset is where the entry starts (versions 2, 3:
    its head).  Version 2 and 3 entries are returned in version 1 terms:
    'W' as 'w', a 'w' with walEnd = dataStart, 0 for what is not stored,
    and version 3 'b' and 'c' as 'w' with their BEGIN or COMMIT rebuilt
    (section 8.3)."""
    out = []
    pos = 0
    if version == 1:
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
    # versions 2, 3: varint H | heads | varint F | fields | data (8.2, 8.3)
    r = varint(body, 0, len(body))
    if r is None or r[0] == 0 or r[0] > len(body) - r[1]:
        return None
    pos = r[1]
    heads_end = pos + r[0]
    r = varint(body, heads_end, len(body))
    if r is None or r[0] > len(body) - r[1]:
        return None
    fpos = r[1]
    fields_end = fpos + r[0]
    dpos = fields_end
    # previous LSN, time; version 3: previous final LSN, BEGIN time, xid
    state = [0, 0, 0, 0, 0]
    while pos < heads_end:
        start = pos
        kind = chr(body[pos])
        r = varint(body, pos + 1, heads_end)
        if r is None:
            return None
        n, pos = r
        if n > len(body) - dpos:
            return None
        if version >= 3 and kind in BEGIN_KINDS:
            if n != 0:
                return None
            r = entry_fields(body, fpos, fields_end, BEGIN_KINDS[kind], state)
            if r is None:
                return None
            ds, we, st, fpos = r
            r = rebuilt_message(body, fpos, fields_end, kind, ds, state)
            if r is None:
                return None
            data, fpos = r
            out.append((start, "w", ds, we, st, data))
            continue
        r = entry_fields(body, fpos, fields_end, kind, state)
        if r is None:
            return None
        ds, we, st, fpos = r
        out.append((start, "w" if kind == "W" else kind, ds, we, st, body[dpos:dpos + n]))
        dpos += n
    if fpos != fields_end or dpos != len(body):
        return None
    return out


def signed64(v):
    """v modulo 2^64 as a two's complement i64."""
    v &= MASK64
    return v - (1 << 64) if v >> 63 else v


def rebuilt_message(body, pos, end, kind, ds, state):
    """(message, next position) of the fields a version 3 'b' or 'c' entry
    adds after those of 'w' or 'W' (docs/FORMAT.md section 8.3), or None
    when they do not decode or the flags exceed 255.  ds is the entry's
    dataStart; state[2:5] are the frame's previous final LSN, BEGIN commit
    time and xid, which a 'b' sets."""
    vals = []
    for i in range(3 if kind == "b" else 4):
        r = varint(body, pos, end) if (kind == "c" and i == 0) else svarint(body, pos, end)
        if r is None:
            return None
        v, pos = r
        vals.append(v)
    if kind == "b":
        final = (ds + vals[0]) & MASK64
        t = signed64(state[3] + vals[1])
        xid = (state[4] + vals[2]) & 0xFFFFFFFF
        state[2], state[3], state[4] = final, t, xid
        return struct.pack(">cQqI", b"B", final, t, xid), pos
    flags, d_commit, d_end, d_time = vals
    if flags > 255:
        return None
    return struct.pack(">cBQQq", b"C", flags, (state[2] + d_commit) & MASK64,
                       (ds + d_end) & MASK64, signed64(state[3] + d_time)), pos


def entry_fields(body, pos, end, kind, state):
    """(dataStart, walEnd, send time, next position) of the fields of a
    version 2 or 3 entry of the given kind at pos (below end), or None when
    they do not decode; state is the frame's [previous LSN, previous time,
    ...]."""
    mask = 0xFFFFFFFFFFFFFFFF
    ds = we = st = 0
    if kind in ("w", "W"):
        r = svarint(body, pos, end)
        if r is None:
            return None
        d, pos = r
        ds = we = (state[0] + d) & mask
        state[0] = ds
    if kind == "W":
        r = svarint(body, pos, end)
        if r is None:
            return None
        d, pos = r
        we = (ds + d) & mask
    if kind == "k":
        r = svarint(body, pos, end)
        if r is None:
            return None
        d, pos = r
        we = (state[0] + d) & mask
        state[0] = we
    if kind in ("W", "k"):
        r = svarint(body, pos, end)
        if r is None:
            return None
        d, pos = r
        st = signed64(state[1] + d)
        state[1] = st
    return ds, we, st, pos


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
        self.min_time = None      # least and greatest commit time
        self.max_time = None
        self.position = None      # position of record at the safe end
        self.valid_end = None
        self.size = None
        self.zero_tail = 0        # bytes of a preallocated tail
        self.torn = None          # reason of a (legal) torn tail
        self.open_txn = None      # final_lsn of an incomplete trailing txn
        self.open_txn_offset = None
        self.unknown_kinds = 0


def new_state(start_lsn=None):
    """What the continuity checks carry from one segment to the next."""
    return {"last_commit": None,   # commit LSNs strictly increase
            "floor": 0,            # LSNs of position-bearing entries never go back
            "floor_what": None,
            "start_lsn": start_lsn}


def read_segment(path, problems, show_entries, show_values, state, torn_ok):
    """Decode one segment.  torn_ok: this is the newest raw segment of its
    generation, where the last frame may be torn.  Every damage goes to
    problems; returns a SegmentResult (header None if unreadable)."""
    r = SegmentResult(path)
    try:
        path, buf, gz_problem = read_segment_bytes(path)
    except FileProblem as e:
        problems.add(path, e.offset, e.text)
        return r
    r.path = path
    if path.endswith(".gz"):
        torn_ok = False
    r.size = len(buf)
    try:
        r.header = decode_header(buf)
    except Damaged as e:
        problems.add(path, 0, "not a valid changestream segment: %s" % e)
        if gz_problem:
            problems.add(path, gz_problem[0], gz_problem[1])
        return r
    h = r.header
    if h["reserved"] != b"\0" * 8:
        problems.add(path, 52, "reserved header bytes 52..59 are not zero")
    if h["seal_state"] == "bad" and not torn_ok:
        problems.add(path, SEAL_OFFSET, "seal CRC mismatch in a segment that is not the newest raw one")
    if show_entries:
        print("segment %s" % path)
        print("  header: version %d, system_identifier %d, generation %016x, "
              "index %d, start_lsn %s, timeline %d, crc %08x"
              % (h["version"], h["system_identifier"], h["generation"],
                 h["segment_index"], lsn(h["start_lsn"]), h["timeline"], h["crc"]))
        if h["seal"]:
            sl = h["seal"]
            print("  seal: end %s, commits %s..%s, commit times %s..%s, %d transactions"
                  % (lsn(sl["end_lsn"]), lsn(sl["first_commit"]), lsn(sl["last_commit"]),
                     pgtime(sl["min_time"]), pgtime(sl["max_time"]), sl["transactions"]))
        elif h["version"] >= 2:
            print("  seal: %s" % ("not sealed" if h["seal_state"] == "none" else "torn (newest raw segment)"))
    position = h["start_lsn"]
    in_txn = False
    txn_final = None
    txn_offset = None
    relations = set()             # relids with a Relation message so far
    version = h["version"]
    off = h["header_size"]
    while off < len(buf):
        blen, reason = check_frame(buf, off, version)
        if blen is None:
            r.valid_end = off
            if torn_ok and not gz_problem and buf.count(0, off) == len(buf) - off:
                # a preallocated tail (section 11.3): the zeros of a spare
                # segment not yet written over; the clean end of the data
                r.zero_tail = len(buf) - off
                break
            after = valid_frame_after(buf, off, version)
            if gz_problem:
                reason = "%s (%s at uncompressed offset %d)" % (
                    reason, gz_problem[1], gz_problem[0])
            if not torn_ok:
                problems.add(path, off, "bad frame in a sealed segment: %s" % reason)
            elif after is not None:
                problems.add(path, off, "bad frame followed by a valid frame at offset %d: %s"
                             % (after, reason))
            else:
                r.torn = reason
            break
        body = buf[off + FRAME_HEADER_SIZE:off + FRAME_HEADER_SIZE + blen]
        entries = split_entries(body, version)
        r.frames += 1
        if show_entries:
            print("  frame @%d: %d bytes, %d entries" % (off, blen, len(entries)))
        for (eoff, kind, ds, we, st, data) in entries:
            at = off + FRAME_HEADER_SIZE + eoff
            r.entries += 1
            r.kinds[kind] = r.kinds.get(kind, 0) + 1
            m = None
            if kind in ("w", "s"):
                try:
                    m = parse_pgoutput(data)
                except Damaged as e:
                    problems.add(path, at, "malformed pgoutput message in frame at offset %d: %s"
                                 % (off, e))
                    m = {"type": chr(data[0]) if data else "?", "brief": "MALFORMED",
                         "malformed": True}
            if kind == "s":
                r.preamble_types[m["type"]] = r.preamble_types.get(m["type"], 0) + 1
                if m["type"] not in ("R", "Y"):
                    problems.add(path, at, "preamble entry of type %r" % m["type"])
                elif m["type"] == "R":
                    relations.add(m["oid"])
            elif kind == "w" and not m.get("malformed"):
                t = m["type"]
                r.types[t] = r.types.get(t, 0) + 1
                # a segment decodes on its own: each change's relation has
                # its Relation message (preamble or streamed) before it
                if t == "R":
                    relations.add(m["oid"])
                for relid in ([m["relid"]] if "relid" in m else m.get("relids", [])):
                    if relid not in relations:
                        problems.add(path, at, "%s of relation %d has no Relation "
                                     "message before it in this segment" % (t, relid))
                if t == "B":
                    if in_txn:
                        problems.add(path, at, "BEGIN inside a transaction")
                    in_txn = True
                    txn_final = m["final_lsn"]
                    txn_offset = at
                elif t == "C":
                    if not in_txn:
                        problems.add(path, at, "COMMIT outside a transaction")
                    elif m["commit_lsn"] != txn_final:
                        problems.add(path, at, "COMMIT lsn %s differs from BEGIN final_lsn %s"
                                     % (lsn(m["commit_lsn"]), lsn(txn_final)))
                    in_txn = False
                    c = m["commit_lsn"]
                    r.transactions += 1
                    if r.first_commit is None:
                        r.first_commit = c
                    if state["last_commit"] is not None and c <= state["last_commit"]:
                        problems.add(path, at, "commit LSN %s is not after the previous commit LSN %s"
                                     % (lsn(c), lsn(state["last_commit"])))
                    elif c < state["floor"]:
                        problems.add(path, at, "commit LSN %s goes back before %s %s"
                                     % (lsn(c), state["floor_what"], lsn(state["floor"])))
                    if m["end_lsn"] < c:
                        problems.add(path, at, "COMMIT end_lsn %s before its commit LSN %s"
                                     % (lsn(m["end_lsn"]), lsn(c)))
                    if state["start_lsn"] is not None and c < state["start_lsn"]:
                        problems.add(path, at, "commit LSN %s before the generation's start_lsn %s"
                                     % (lsn(c), lsn(state["start_lsn"])))
                    state["last_commit"] = c
                    r.last_commit = c
                    t_c = m["commit_time"]
                    r.min_time = t_c if r.min_time is None else min(r.min_time, t_c)
                    r.max_time = t_c if r.max_time is None else max(r.max_time, t_c)
                    state["floor"] = max(state["floor"], m["end_lsn"])
                    state["floor_what"] = "the end of the previous transaction"
                    position = max(position, m["end_lsn"])
                elif t in ("I", "U", "D", "T", "R", "Y") and not in_txn:
                    problems.add(path, at, "%s message outside a transaction" % t)
                elif t == "M" and not m["transactional"] and not in_txn:
                    # archived only at or after the position of record (9.1)
                    if m["lsn"] < position:
                        problems.add(path, at, "message LSN %s lies before the position of record %s"
                                     % (lsn(m["lsn"]), lsn(position)))
                    elif m["lsn"] < state["floor"]:
                        problems.add(path, at, "message LSN %s goes back before %s %s"
                                     % (lsn(m["lsn"]), state["floor_what"], lsn(state["floor"])))
                    state["floor"] = max(state["floor"], m["lsn"])
                    state["floor_what"] = "the previous message's LSN"
                    position = max(position, m["lsn"] + 1)
                elif t == "M" and m["transactional"] and not in_txn:
                    problems.add(path, at, "transactional message outside a transaction")
            elif kind == "k":
                if data:
                    problems.add(path, at, "position entry with %d data bytes" % len(data))
                if in_txn:
                    problems.add(path, at, "position entry inside a transaction")
                else:
                    # recorded only past the position of record (9.3)
                    if we <= position:
                        problems.add(path, at, "position %s does not advance the position of record %s"
                                     % (lsn(we), lsn(position)))
                    elif we < state["floor"]:
                        problems.add(path, at, "position %s goes back before %s %s"
                                     % (lsn(we), state["floor_what"], lsn(state["floor"])))
                    state["floor"] = max(state["floor"], we)
                    state["floor_what"] = "the previous position"
                    position = max(position, we)
            elif kind not in ("w", "s"):
                r.unknown_kinds += 1
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
                    if m.get("type") == "M" and "content" in m:
                        print("        content: %r" % m["content"])
        off += FRAME_HEADER_SIZE + blen
    else:
        r.valid_end = off
    if gz_problem and r.torn is None and r.valid_end == len(buf):
        # the stream broke exactly at a frame boundary
        problems.add(path, gz_problem[0], gz_problem[1])
    r.position = position
    sl = h["seal"]
    if sl is not None and not torn_ok:
        got = (position, r.first_commit or 0, r.last_commit or 0, r.min_time or 0,
               r.max_time or 0, r.transactions)
        want = (sl["end_lsn"], sl["first_commit"], sl["last_commit"], sl["min_time"],
                sl["max_time"], sl["transactions"])
        if got != want:
            problems.add(path, SEAL_OFFSET,
                         "the seal says end %s, commits %s..%s, %d transactions (times %s..%s); "
                         "the segment holds end %s, commits %s..%s, %d transactions (times %s..%s)"
                         % (lsn(want[0]), lsn(want[1]), lsn(want[2]), want[5], pgtime(want[3]),
                            pgtime(want[4]), lsn(got[0]), lsn(got[1]), lsn(got[2]), got[5],
                            pgtime(got[3]), pgtime(got[4])))
        if sl["reserved"] != b"\0" * 12:
            problems.add(path, SEAL_OFFSET + 48, "reserved seal bytes 112..123 are not zero")
    if in_txn:
        r.open_txn = txn_final
        r.open_txn_offset = txn_offset
        if not torn_ok:
            problems.add(path, txn_offset, "sealed segment ends inside a transaction "
                         "(BEGIN final_lsn %s)" % lsn(txn_final))
    return r

# ---------------------------------------------------------------- generations


def segment_files(wal_dir):
    """{index: path} in index order; the .gz is used when a raw twin still
    exists (the compressor's crash window, docs/FORMAT.md section 5.2)."""
    files = {}
    for name in sorted(os.listdir(wal_dir)):
        mo = SEGMENT_NAME.match(name)
        if not mo:
            continue
        idx = int(mo.group(1), 16)
        if mo.group(2) or idx not in files:
            files[idx] = os.path.join(wal_dir, name)
    return dict(sorted(files.items()))


IDENTITY_REQUIRED = ("format_version", "generation", "system_identifier",
                     "timeline", "start_lsn")
LSN_TEXT = re.compile(r"^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$")
CREATED_AT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")


def parse_lsn(text):
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def read_identity(gen_dir, gen_name, problems):
    """The identity file as a dict, or None when it cannot be used; every
    problem is reported with the file's path."""
    path = os.path.join(gen_dir, "generation")
    if not os.path.lexists(path):
        problems.add(path, 0, "identity file missing")
        return None
    try:
        raw = read_regular_file(path)
    except FileProblem as e:
        problems.add(path, e.offset, e.text)
        return None
    ident = {}
    off = 0
    for line in raw.split(b"\n"):
        lineoff = off
        off += len(line) + 1
        if len(line) > 1023:
            problems.add(path, lineoff, "line longer than 1023 bytes")
            continue
        try:
            text = line.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            problems.add(path, lineoff, "line is not UTF-8")
            continue
        if text.startswith("#") or " = " not in text:
            continue
        k, v = text.split(" = ", 1)
        ident[k] = v
    bad = False
    for key in IDENTITY_REQUIRED:
        if key not in ident:
            problems.add(path, 0, "identity file lacks required key %s" % key)
            bad = True
    if "start_lsn" in ident and not LSN_TEXT.match(ident["start_lsn"]):
        problems.add(path, 0, "invalid start_lsn %r" % ident["start_lsn"])
        bad = True
    if "generation" in ident and GENERATION_NAME.match(gen_name) \
            and ident["generation"] != gen_name:
        problems.add(path, 0, "identity generation %r differs from the directory %s"
                     % (ident["generation"], gen_name))
    for key in ("system_identifier", "timeline", "format_version"):
        if key in ident and not ident[key].isdigit():
            problems.add(path, 0, "invalid %s %r" % (key, ident[key]))
    if "created_at" in ident:
        ok = bool(CREATED_AT.match(ident["created_at"]))
        if ok:
            try:
                datetime.datetime.strptime(ident["created_at"], "%Y-%m-%dT%H:%M:%S.%fZ")
            except ValueError:
                ok = False
        if not ok:
            problems.add(path, 0, "invalid created_at %r" % ident["created_at"])
    return None if bad else ident


def check_snapshots(gen_dir, problems):
    """Snapshot files must be regular gzip files; the directory readable."""
    snap_dir = os.path.join(gen_dir, "snapshots")
    try:
        names = sorted(os.listdir(snap_dir))
    except OSError as e:
        problems.add(snap_dir, 0, "could not read directory: %s" % e.strerror)
        return 0
    n = 0
    for name in names:
        if not SNAPSHOT_NAME.match(name):
            continue
        p = os.path.join(snap_dir, name)
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(p, flags)
        except OSError as e:
            problems.add(p, 0, "could not open file: %s" % e.strerror)
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                problems.add(p, 0, "\"%s\" is not a regular file" % p)
            elif os.read(fd, 2) != b"\x1f\x8b":
                problems.add(p, 0, "not a gzip file")
            else:
                n += 1
        except OSError as e:
            problems.add(p, 0, "could not read file: %s" % e.strerror)
        finally:
            os.close(fd)
    return n


def read_generation(gen_dir, problems, show, show_values):
    """Check and decode one generation directory; returns the segment results."""
    results = []
    gen_name = os.path.basename(os.path.abspath(gen_dir))
    ident = read_identity(gen_dir, gen_name, problems)
    if ident is not None and not GENERATION_NAME.match(gen_name):
        gen_name = ident["generation"]       # a renamed copy
    if show:
        print("generation %s" % gen_name)
        if ident:
            for k, v in ident.items():
                print("  %s = %s" % (k, v))
    check_snapshots(gen_dir, problems)
    wal_dir = os.path.join(gen_dir, "wal")
    try:
        files = segment_files(wal_dir)
    except OSError as e:
        problems.add(wal_dir, 0, "could not read directory: %s" % e.strerror)
        return gen_name, results
    horizon = read_horizon(gen_dir, problems)
    first_index = 0
    if horizon is not None:
        # below the retention horizon: being deleted, ignored (FORMAT.md 4.3)
        first_index = horizon["first_segment"]
        files = dict((i, f) for i, f in files.items() if i >= first_index)
        if not files:
            # retention never deletes the newest segment
            problems.add(wal_dir, 0, "the retention horizon keeps segments from %016x on, "
                         "but none is there" % first_index)
    indexes = list(files)
    expected_start = None
    state = new_state()
    if ident is not None:
        expected_start = parse_lsn(ident["start_lsn"])
        state["start_lsn"] = expected_start
        if horizon is not None and first_index > 0:
            expected_start = None       # the first segment kept starts before the horizon
    prev_ok = True
    prev_version = 1
    for n, idx in enumerate(indexes):
        p = files[idx]
        newest = n == len(indexes) - 1
        expected_idx = indexes[n - 1] + 1 if n > 0 else first_index
        if idx != expected_idx:
            missing = os.path.join(wal_dir, "%016x.wal" % expected_idx)
            problems.add(p, 0, "gap in segment indexes: segment %016x is missing (%s)"
                         % (expected_idx, missing))
            prev_ok = False
        r = read_segment(p, problems, show, show_values, state,
                         torn_ok=newest and not p.endswith(".gz"))
        results.append(r)
        p = r.path
        if r.header is None:
            prev_ok = False
            continue
        h = r.header
        if h["version"] < prev_version:
            problems.add(p, 0, "format version %d after a segment of version %d"
                         % (h["version"], prev_version))
        prev_version = h["version"]
        if h["segment_index"] != idx:
            problems.add(p, 0, "header says segment index %d, the file name %d"
                         % (h["segment_index"], idx))
        if GENERATION_NAME.match(gen_name) and "%016x" % h["generation"] != gen_name:
            problems.add(p, 0, "header says generation %016x, the directory %s"
                         % (h["generation"], gen_name))
        if ident is not None:
            if str(h["system_identifier"]) != ident.get("system_identifier"):
                problems.add(p, 0, "system identifier %d differs from the identity's %s"
                             % (h["system_identifier"], ident.get("system_identifier")))
            if str(h["timeline"]) != ident.get("timeline"):
                problems.add(p, 0, "timeline %d differs from the identity's %s"
                             % (h["timeline"], ident.get("timeline")))
        if prev_ok and expected_start is not None and h["start_lsn"] != expected_start:
            problems.add(p, 0, "start_lsn %s, but %s ends at %s"
                         % (lsn(h["start_lsn"]),
                            "the identity's start_lsn" if n == 0 else "the previous segment",
                            lsn(expected_start)))
        if n == 0 and horizon is not None and h["start_lsn"] > horizon["snapshot_lsn"]:
            problems.add(p, 0, "starts at %s, after the retention horizon's snapshot %s"
                         % (lsn(h["start_lsn"]), lsn(horizon["snapshot_lsn"])))
        expected_start = r.position
        prev_ok = True
    if horizon is not None:
        check_snapshot_contents(gen_dir, horizon["snapshot_lsn"], problems, True)
    else:
        check_snapshot_contents(gen_dir, parse_lsn(ident["start_lsn"]) if ident is not None else None,
                                problems)
    return gen_name, results


def read_horizon(gen_dir, problems):
    """The retention horizon (docs/FORMAT.md section 4.3), or None without one."""
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
        problems.add(path, 0, "the retention horizon lacks first_segment, snapshot_lsn "
                     "or snapshot_time_us")
        return None

# ---------------------------------------------------------------- main


def summarize(title, results, problems, torn_notes=True):
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
        if r.zero_tail:
            print("  preallocated tail: %s: %d zero bytes after offset %d" % (
                os.path.basename(r.path), r.zero_tail, r.valid_end))
        if r.torn:
            print("  torn tail: %s at offset %d of %d: %s" % (
                os.path.basename(r.path), r.valid_end, r.size, r.torn))
        if r.open_txn is not None:
            print("  incomplete final transaction (final_lsn %s) in %s" % (
                lsn(r.open_txn), os.path.basename(r.path)))
        if r.unknown_kinds:
            print("  %d entries of unknown kind ignored in %s" % (
                r.unknown_kinds, os.path.basename(r.path)))


def database_name(tree):
    """The database name of a databases/<tree> directory: every byte other
    than a-z, 0-9, _ and - is written %XX there (docs/databases.md)."""
    raw = re.sub(rb"%([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]),
                 tree.encode("utf-8", "surrogateescape"))
    return raw.decode("utf-8", "replace")


def read_archive(path, label, problems, show, values, sections):
    """Every generation of the archive tree path (it holds generations/),
    appended to sections with label before each title."""
    gens_dir = os.path.join(path, "generations")
    try:
        names = sorted(n for n in os.listdir(gens_dir) if GENERATION_NAME.match(n))
    except OSError as e:
        problems.add(gens_dir, 0, "could not read directory: %s" % e.strerror)
        names = []
    for name in names:
        g = os.path.join(gens_dir, name)
        if not os.path.isdir(g):
            problems.add(g, 0, "\"%s\" is not a directory" % g)
            continue
        gen_name, results = read_generation(g, problems, show, values)
        sections.append(("%sgeneration %s" % (label, gen_name), results))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", help="a .wal or .wal.gz segment, a generation directory, "
                    "or an archive directory (changestream.directory)")
    ap.add_argument("--summary", action="store_true", help="counts and positions only")
    ap.add_argument("--values", action="store_true", help="print tuple values too")
    args = ap.parse_args()

    path = args.path.rstrip("/") or "/"
    problems = Problems()
    show = not args.summary
    sections = []

    if os.path.isdir(path) and (os.path.isdir(os.path.join(path, "generations")) or
                                os.path.isdir(os.path.join(path, "databases"))):
        if os.path.isdir(os.path.join(path, "generations")):
            read_archive(path, "", problems, show, args.values, sections)
        dbs_dir = os.path.join(path, "databases")
        if os.path.isdir(dbs_dir):
            try:
                trees = sorted(os.listdir(dbs_dir))
            except OSError as e:
                problems.add(dbs_dir, 0, "could not read directory: %s" % e.strerror)
                trees = []
            for tree in trees:
                t = os.path.join(dbs_dir, tree)
                if os.path.isdir(os.path.join(t, "generations")):
                    read_archive(t, "database %s, " % database_name(tree),
                                 problems, show, args.values, sections)
    elif os.path.isdir(path):
        gen_dir = path
        if os.path.basename(path) == "wal":
            gen_dir = os.path.dirname(path)
        if not os.path.isdir(os.path.join(gen_dir, "wal")):
            print("%s: no wal/ or generations/ directory: not a generation or archive"
                  % path, file=sys.stderr)
            return 2
        gen_name, results = read_generation(gen_dir, problems, show, args.values)
        sections.append(("generation %s" % gen_name, results))
    else:
        # a single segment: a raw one may be the newest of its generation
        r = read_segment(path, problems, show, args.values, new_state(),
                         torn_ok=not path.endswith(".gz"))
        sections.append(("segment %s" % path, [r]))

    for title, results in sections:
        if show:
            print()
        summarize(title, results, problems)
    if problems:
        print("  PROBLEMS: %d (on stderr)" % len(problems))
        sys.stdout.flush()
        problems.print(sys.stderr)
        return 1
    print("  all CRCs and messages valid")
    return 0


# ---------------------------------------------------------------- snapshot contents
# The snapshot checks of changestream.verify() (docs/DESIGN.md section 10):
# the whole gzip stream, the manifest, the tables and rows it announces
# against the COPY sections and rows really there, the file name's LSN, and
# a snapshot at the generation's start.  Offsets are in the decompressed
# stream.  check_snapshots() above checks the files' kind first.

def check_snapshot_file(path, problems):
    import json
    name = os.path.basename(path)
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as e:
        problems.add(path, 0, "the gzip stream cannot be decompressed: %s" % e)
        return
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
        problems.add(path, 0, "the snapshot does not begin with a valid manifest")
        return
    try:
        manifest = json.loads(keys["manifest"])
        json_rows = sum(int(t["rows"]) for t in manifest["tables"])
        json_tables = len(manifest["tables"])
    except (ValueError, KeyError, TypeError) as e:
        problems.add(path, 0, "the manifest's JSON is not valid: %s" % e)
        return
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
            problems.add(path, offset, "a table section does not start with a COPY line")
            return
        offset += len(line) + 1
    if in_section:
        problems.add(path, len(data), "the file ends inside a table section")
    if name.split(".")[0] != "%016X" % parse_lsn(keys["lsn"]):
        problems.add(path, 0, "the file name's LSN is not the manifest's %s" % keys["lsn"])
    if not (sections == int(keys["tables"]) == json_tables):
        problems.add(path, 0, "the manifest announces %s tables (JSON: %d), the file holds %d"
                     % (keys["tables"], json_tables, sections))
    if not (rows == int(keys["rows"]) == json_rows):
        problems.add(path, 0, "the manifest announces %s rows (JSON: %d), the file holds %d"
                     % (keys["rows"], json_rows, rows))


def check_snapshot_contents(gen_dir, start_lsn, problems, horizon=False):
    snap_dir = os.path.join(gen_dir, "snapshots")
    try:
        names = sorted(n for n in os.listdir(snap_dir) if SNAPSHOT_NAME.match(n))
    except OSError:
        return                  # check_snapshots() reported it
    if horizon:
        # below the retention horizon: being deleted, ignored
        names = [n for n in names if int(n[:16], 16) >= start_lsn]
    for n in names:
        p = os.path.join(snap_dir, n)
        if os.path.isfile(p):
            check_snapshot_file(p, problems)
    if start_lsn is not None and "%016X.snapshot.gz" % start_lsn not in names:
        problems.add(snap_dir, 0, "no snapshot at the generation's %s %s"
                     % ("retention horizon" if horizon else "start", lsn(start_lsn)))


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        sys.exit(0)
    except Exception as e:      # a bug in this script, not damage
        print("cs_decode.py: internal error (a bug in cs_decode.py, not a finding "
              "about the archive): %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(3)
