"""Rewrites an ltrain checkpoint as if another device had written it: every tensor's storage
location ('cpu') becomes LOCATION ('cuda:0'), as torch records it for a GPU tensor. A CPU-only
machine cannot make a real GPU checkpoint, and this is the only part of one that differs.

  relocate_checkpoint.py IN.pt OUT.pt cuda:0
"""
import io, struct, sys, zipfile, zlib
src, dst, loc = sys.argv[1], sys.argv[2], sys.argv[3]
b = open(src, "rb").read()
magic, n, crc = b[:8], struct.unpack("<Q", b[8:16])[0], struct.unpack("<I", b[16:20])[0]
zin = zipfile.ZipFile(io.BytesIO(b[20:20 + n]))
out = io.BytesIO()
with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
    for info in zin.infolist():
        data = zin.read(info.filename)
        if info.filename.endswith("data.pkl"):
            old = b"X\x03\x00\x00\x00cpu"
            assert old in data
            new = b"X" + struct.pack("<I", len(loc)) + loc.encode()
            data = data.replace(old, new)
        zout.writestr(info.filename, data)
p = out.getvalue()
open(dst, "wb").write(magic + struct.pack("<Q", len(p)) + struct.pack("<I", zlib.crc32(p) & 0xffffffff) + p)
