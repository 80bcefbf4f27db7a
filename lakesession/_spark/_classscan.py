"""Pure-Python tooling for JVM class files and jars.

Used by the offline jar assembly to check, without starting a JVM, that every
relocated class the Iceberg runtime refers to is present in the jar set, and
that no class escaped relocation. Only what those checks need is parsed: the
constant pool (class, member-descriptor and method-type entries), the
class's own name and the descriptors of its declared fields and methods.

It can also emit a trivial interface class file (``interface_class_bytes``),
used as a fallback when ``javac`` is not installed (a JRE-only machine), and
merge jars into one (``merge_jars``) as input for a relocation tool.
"""

from __future__ import annotations

import re
import struct
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "ClassFormatError",
    "ClassInfo",
    "JarScan",
    "interface_class_bytes",
    "merge_jars",
    "parse_class",
    "scan_jar",
]

_MAGIC = b"\xca\xfe\xba\xbe"
_U2 = struct.Struct(">H")
_U4 = struct.Struct(">I")
_DESC_TYPE = re.compile(r"L([^;<]+)[;<]")

# Constant-pool tag -> byte length of its payload (after the tag byte).
_FIXED = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}


class ClassFormatError(ValueError):
    """The bytes are not a class file this parser understands."""


@dataclass
class ClassInfo:
    name: str
    major: int
    super_name: str | None
    refs: set[str] = field(default_factory=set)


def _decode(raw: bytes) -> str:
    # Class files use "modified UTF-8"; class names are (almost always) ASCII.
    return raw.decode("utf-8", errors="replace")


def _types_in_descriptor(desc: str) -> Iterable[str]:
    return _DESC_TYPE.findall(desc)


def parse_class(data: bytes) -> ClassInfo:
    """Parse ``data`` (one .class file) and return its name and referenced classes.

    ``refs`` holds every class named by a CONSTANT_Class entry (array element
    types unwrapped), and every class type that appears in a member or
    method-type descriptor (constant pool NameAndType/MethodType entries and
    the declared fields' and methods' descriptors).
    """
    if data[:4] != _MAGIC:
        raise ClassFormatError("bad magic")
    try:
        major = _U2.unpack_from(data, 6)[0]
        count = _U2.unpack_from(data, 8)[0]
        pos = 10
        utf8: dict[int, tuple[int, int]] = {}
        class_entries: list[tuple[int, int]] = []  # (pool index, name index)
        desc_idx: list[int] = []
        i = 1
        while i < count:
            tag = data[pos]
            if tag == 1:
                n = _U2.unpack_from(data, pos + 1)[0]
                utf8[i] = (pos + 3, pos + 3 + n)
                pos += 3 + n
            else:
                size = _FIXED.get(tag)
                if size is None:
                    raise ClassFormatError(f"unknown constant-pool tag {tag} at entry {i}")
                if tag == 7:
                    class_entries.append((i, _U2.unpack_from(data, pos + 1)[0]))
                elif tag == 12:
                    desc_idx.append(_U2.unpack_from(data, pos + 3)[0])
                elif tag == 16:
                    desc_idx.append(_U2.unpack_from(data, pos + 1)[0])
                pos += 1 + size
                if tag in (5, 6):  # long and double take two slots
                    i += 1
            i += 1

        def utf(idx: int) -> str:
            start, end = utf8[idx]
            return _decode(data[start:end])

        class_names = {cp: utf(ni) for cp, ni in class_entries}

        def cls(idx: int) -> str | None:
            return class_names.get(idx) if idx else None

        refs: set[str] = set()
        for name in class_names.values():
            if name.startswith("["):
                refs.update(_types_in_descriptor(name))
            else:
                refs.add(name)
        for idx in desc_idx:
            refs.update(_types_in_descriptor(utf(idx)))

        access_end = pos + 2
        this_name = cls(_U2.unpack_from(data, access_end)[0]) or ""
        super_name = cls(_U2.unpack_from(data, access_end + 2)[0])
        pos = access_end + 4
        n_ifaces = _U2.unpack_from(data, pos)[0]
        pos += 2 + 2 * n_ifaces
        for _members in range(2):  # fields, then methods
            n = _U2.unpack_from(data, pos)[0]
            pos += 2
            for _ in range(n):
                desc = _U2.unpack_from(data, pos + 4)[0]
                refs.update(_types_in_descriptor(utf(desc)))
                n_attrs = _U2.unpack_from(data, pos + 6)[0]
                pos += 8
                for _a in range(n_attrs):
                    pos += 6 + _U4.unpack_from(data, pos + 2)[0]
    except (IndexError, KeyError, struct.error) as exc:
        raise ClassFormatError(f"truncated or malformed class file: {exc}") from exc
    refs.discard(this_name)
    return ClassInfo(name=this_name, major=major, super_name=super_name, refs=refs)


@dataclass
class JarScan:
    """Classes a jar defines, and the (filtered) classes its bytecode references."""

    path: Path
    defined: set[str] = field(default_factory=set)
    refs: dict[str, set[str]] = field(default_factory=dict)  # ref -> referencing classes
    class_count: int = 0
    max_major: int = 0

    def referenced(self) -> set[str]:
        return set(self.refs)


def _class_name_from_entry(name: str) -> str:
    stem = name[: -len(".class")]
    if stem.startswith("META-INF/versions/"):
        # META-INF/versions/<n>/<class path>: a multi-release variant of a class.
        stem = stem.split("/", 3)[3] if stem.count("/") >= 3 else stem
    return stem


def scan_jar(path: str | Path, ref_prefixes: tuple[str, ...] = ()) -> JarScan:
    """List the classes in a jar and the references that start with ``ref_prefixes``.

    Only classes whose bytes contain one of the prefixes are parsed, which
    keeps a 20 000-class jar to a couple of seconds. With no prefixes, only
    the defined class names are collected.
    """
    result = JarScan(path=Path(path))
    needles = tuple(p.encode() for p in ref_prefixes)
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename
            if not name.endswith(".class") or name.endswith("module-info.class"):
                continue
            result.class_count += 1
            result.defined.add(_class_name_from_entry(name))
            if not needles:
                continue
            data = zf.read(info)
            if not any(n in data for n in needles):
                continue
            info_ = parse_class(data)
            result.max_major = max(result.max_major, info_.major)
            for ref in info_.refs:
                if ref.startswith(ref_prefixes):
                    result.refs.setdefault(ref, set()).add(info_.name)
    return result


def missing_references(scans: Iterable[JarScan], available: Iterable[JarScan]) -> dict[str, set[str]]:
    """References made by ``scans`` to classes defined by none of ``available``."""
    defined: set[str] = set()
    for s in available:
        defined |= s.defined
    missing: dict[str, set[str]] = {}
    for s in scans:
        for ref, users in s.refs.items():
            if ref not in defined:
                missing.setdefault(ref, set()).update(users)
    return missing


def interface_class_bytes(
    name: str,
    methods: Iterable[tuple[str, str, tuple[str, ...]]],
    major: int = 52,
) -> bytes:
    """Return the bytes of ``public interface <name>`` with abstract ``methods``.

    ``methods`` are ``(name, descriptor, thrown exception classes)``. The
    result is what ``javac --release 8`` produces for such an interface,
    minus debug attributes.
    """
    pool: list[bytes] = []
    index: dict[tuple[int, str | int], int] = {}

    def add(tag: int, value: str | int) -> int:
        key = (tag, value)
        if key in index:
            return index[key]
        if tag == 1:
            raw = str(value).encode("utf-8")
            entry = bytes([1]) + _U2.pack(len(raw)) + raw
        else:  # tag 7: Class -> utf8 index
            entry = bytes([7]) + _U2.pack(int(value))
        pool.append(entry)
        index[key] = len(pool)
        return len(pool)

    def add_class(cname: str) -> int:
        return add(7, add(1, cname))

    this_idx = add_class(name)
    super_idx = add_class("java/lang/Object")
    method_blobs = []
    for mname, desc, throws in methods:
        name_idx, desc_idx = add(1, mname), add(1, desc)
        attrs = b""
        n_attrs = 0
        if throws:
            exc_attr = add(1, "Exceptions")
            body = _U2.pack(len(throws)) + b"".join(_U2.pack(add_class(t)) for t in throws)
            attrs = _U2.pack(exc_attr) + _U4.pack(len(body)) + body
            n_attrs = 1
        method_blobs.append(_U2.pack(0x0401) + _U2.pack(name_idx) + _U2.pack(desc_idx) + _U2.pack(n_attrs) + attrs)
    out = bytearray(_MAGIC)
    out += _U2.pack(0) + _U2.pack(major)
    out += _U2.pack(len(pool) + 1) + b"".join(pool)
    out += _U2.pack(0x0601)  # public interface abstract
    out += _U2.pack(this_idx) + _U2.pack(super_idx)
    out += _U2.pack(0)  # interfaces
    out += _U2.pack(0)  # fields
    out += _U2.pack(len(method_blobs)) + b"".join(method_blobs)
    out += _U2.pack(0)  # class attributes
    return bytes(out)


def _excluded(name: str) -> bool:
    upper = name.upper()
    return (
        name.startswith(("META-INF/versions/", "META-INF/maven/", "META-INF/services/"))
        or name.endswith("module-info.class")
        or upper == "META-INF/MANIFEST.MF"
        or upper == "META-INF/INDEX.LIST"
        or (upper.startswith("META-INF/") and upper.endswith((".SF", ".DSA", ".RSA", ".EC")))
    )


def merge_jars(sources: list[Path], extra: dict[str, bytes], dest: Path) -> int:
    """Merge ``sources`` (+ ``extra`` entries) into one jar for jarjar; returns entry count.

    Drops multi-release variants, module descriptors, signatures, manifests,
    Maven metadata and service files; keeps each source's license files under
    ``META-INF/licenses/<jar>/``. The first copy of a duplicate entry wins.
    """
    seen: set[str] = set()
    stamp = (2010, 1, 1, 0, 0, 0)

    def put(out: zipfile.ZipFile, name: str, data: bytes) -> None:
        if name not in seen:
            seen.add(name)
            out.writestr(zipfile.ZipInfo(name, stamp), data, zipfile.ZIP_DEFLATED)

    with zipfile.ZipFile(dest, "w") as out:
        put(out, "META-INF/MANIFEST.MF", b"Manifest-Version: 1.0\r\nCreated-By: lakesession\r\n\r\n")
        for src in sources:
            with zipfile.ZipFile(src) as zf:
                for info in zf.infolist():
                    name = info.filename
                    if info.is_dir() or _excluded(name):
                        continue
                    if name.startswith("META-INF/"):
                        name = f"META-INF/licenses/{src.stem}/{name[len('META-INF/') :]}"
                    put(out, name, zf.read(info))
        for name, data in extra.items():
            put(out, name, data)
    return len(seen)
