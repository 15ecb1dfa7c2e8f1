"""Kafka's ``ssl.principal.mapping.rules``: a certificate's distinguished name -> a principal name.

Syntax (Kafka's ``SslPrincipalMapper``): rules separated by commas or newlines, tried in order, the
first that matches wins::

    RULE:<regex>/<replacement>/[L|U]     the regex must match the whole DN; the replacement may use
                                         $1, ${name} (Java's syntax); L or U lower/upper-cases the result
    DEFAULT                              the DN itself

``/`` inside a regex or replacement is written ``\\/``. The regex itself may contain commas (the rule
ends at its third ``/``). No rule matching is an error (``NoMatchingRuleError``), as in Kafka; the
default rule list is ``DEFAULT``.

Python's ``re`` stands in for Java's regex dialect; the two agree on everything such rules use (groups,
lazy quantifiers, classes, anchors). Pure. Must not import ``services`` or ``pipelines``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


class InvalidRuleError(ValueError):
    """The rules text does not parse (a broker refuses to start with it)."""


class NoMatchingRuleError(ValueError):
    """No rule applies to a distinguished name (the peer is refused)."""


@dataclass(frozen=True)
class MappingRule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        result = _expand(m, self.replacement)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        esc = self.pattern.pattern.replace("/", "\\/")
        return f"RULE:{esc}/{self.replacement.replace('/', chr(92) + '/')}/{self.case}"


_REF = re.compile(r"\$(\d+)|\$\{([A-Za-z][A-Za-z0-9]*)\}|\\(.)")


def _expand(m: re.Match[str], replacement: str) -> str:
    """Java ``Matcher`` replacement syntax: ``$n``, ``${name}``, ``\\x`` for a literal x."""

    def sub(ref: re.Match[str]) -> str:
        if ref.group(3) is not None:
            return ref.group(3)
        try:
            value = m.group(int(ref.group(1)) if ref.group(1) is not None else ref.group(2))
        except IndexError as exc:  # no such group number or name
            raise NoMatchingRuleError(f"replacement refers to a missing group: {ref.group(0)}") from exc
        return value or ""

    return _REF.sub(sub, replacement)



def _read_part(text: str, i: int) -> tuple[str, int]:
    """Read up to an unescaped '/', unescaping '\\/'; returns (part, index after the '/')."""
    out = []
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            out.append("/" if nxt == "/" else ch + nxt)
            i += 2
            continue
        if ch == "/":
            return "".join(out), i + 1
        out.append(ch)
        i += 1
    raise InvalidRuleError("rule ends before its closing '/'")


def parse_rules(rules: str | Iterable[str] | None) -> list[MappingRule]:
    """Parse the config value (a string, or a list of strings as Kafka's list form)."""
    if rules is None:
        return [MappingRule(None)]
    text = rules if isinstance(rules, str) else ",".join(rules)
    out: list[MappingRule] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n":
            i += 1
        if i >= n:
            break
        if text.startswith("DEFAULT", i):
            out.append(MappingRule(None))
            i += len("DEFAULT")
        elif text.startswith("RULE:", i):
            pattern, i = _read_part(text, i + len("RULE:"))
            replacement, i = _read_part(text, i)
            case = ""
            if i < n and text[i] in "LU":
                case, i = text[i], i + 1
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise InvalidRuleError(f"invalid regex {pattern!r}: {exc}") from exc
            out.append(MappingRule(compiled, replacement, case))
        else:
            raise InvalidRuleError(f"invalid rule at {text[i:i + 40]!r}")
        while i < n and text[i] in " \t\r":
            i += 1
        if i < n:
            if text[i] not in ",\n":
                raise InvalidRuleError(f"invalid rule at {text[i:i + 40]!r}")
            i += 1
    if not out:
        raise InvalidRuleError("no rules (use DEFAULT)")
    return out


class PrincipalMapper:
    """``PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,DEFAULT").name(dn)``."""

    def __init__(self, rules: str | Iterable[str] | None = "DEFAULT") -> None:
        self.rules = parse_rules(rules)

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise NoMatchingRuleError(f"no rules apply to {dn!r}, rules {[str(r) for r in self.rules]}")

    def principal(self, dn: str) -> str:
        """The Kafka principal string, ``User:<name>``."""
        return f"User:{self.name(dn)}"
