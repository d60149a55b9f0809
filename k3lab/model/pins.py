"""Version pins and ranges: how a component version read from the nodes meets what a gate policy states.

A policy's ``expect`` is ``guide`` (the guide's pin, resolved by :mod:`k3lab.launch.versions`), ``any``, an exact
version or a PEP 440 specifier set (``>=0.23,<0.24``, ``==0.23.0.*``). Matching is never by prefix (#35): a patch
build (0.23.0.post1), a local fork (0.23.0+fork) or another epoch (1!0.23.0) is not the pinned 0.23.0; a lab
that accepts them says so with a range. ``packaging`` parses both sides (no hand parsing).
"""
from __future__ import annotations

SPECIFIER_START = ("<", ">", "=", "!", "~")  # an expect starting so is a PEP 440 specifier set (a range)


def is_range(expected: str) -> bool:
    return expected.strip().startswith(SPECIFIER_START)


def check_expect(expected: str) -> str:
    """``expected`` as a policy may state it, else a ValueError saying why: ``any``, an exact version (PEP 440
    or, for components that do not follow it like CANN's 8.3.RC1, an exact string) or a specifier set."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    if is_range(expected):
        try:
            SpecifierSet(expected)
        except InvalidSpecifier:
            raise ValueError(f"{expected!r} is not a version range (a PEP 440 specifier set such as "
                             "'>=0.23,<0.24' or '==0.23.0.*')") from None
    return expected


def matches(actual: str | None, expected: str) -> bool:
    """Whether the version read from the nodes is what the policy states (#35: never by prefix).

    ``any`` accepts every version; a specifier set (``>=0.23,<0.24``, ``==0.23.0.*``) accepts what it contains
    (pre-releases only when it names one); anything else is an exact pin: equal as PEP 440 versions when both
    parse (0.23 == 0.23.0, 8.3.rc1 == 8.3.RC1; 0.23.0.post1, 0.23.0+fork and 1!0.23.0 are not 0.23.0), else equal
    as strings."""
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    if actual is None:
        return False
    if expected == "any":
        return True
    try:
        version: Version | None = Version(actual)
    except InvalidVersion:
        version = None
    if is_range(expected):
        return version is not None and SpecifierSet(check_expect(expected)).contains(version)
    if version is None:  # not a PEP 440 version (CANN's 8.3.RC1 is; a vendor's 25.2.0-custom is not)
        return actual.strip() == expected.strip()
    try:
        return version is not None and version == Version(expected)
    except InvalidVersion:  # a pin that is no PEP 440 version: the same string
        return actual.strip() == expected.strip()
