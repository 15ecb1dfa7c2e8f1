"""ssl.principal.mapping.rules: Kafka's documented examples, escapes, case, and invalid rules."""

from __future__ import annotations

import pytest

from shared.security.principal_mapping import InvalidRuleError, NoMatchingRuleError, PrincipalMapper, parse_rules

KAFKA_DOC_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
    "DEFAULT"
)


@pytest.mark.parametrize("dn, name", [
    # Kafka's documentation (security.html, "Customizing SSL User Name")
    ("CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "serviceuser"),
    ("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "adminuser@admin"),
    ("OU=x,cn=Some.Host1,O=y", "some.host1"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),  # DEFAULT
    # the third documented rule's class has no '-': it keeps "broker" of "broker-1"
    ("CN=broker-1,OU=tidelog-service", "broker"),
])
def test_kafka_documented_rules(dn: str, name: str) -> None:
    assert PrincipalMapper(KAFKA_DOC_RULES).name(dn) == name


def test_rules_on_separate_lines_and_with_spaces() -> None:
    mapper = PrincipalMapper(" RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/U \n RULE:^CN=([^,]+),OU=tidelog-service$/svc-$1/ ,\nDEFAULT ")
    assert mapper.name("CN=app,OU=ServiceUsers,O=x") == "APP"
    assert mapper.name("CN=broker-1,OU=tidelog-service") == "svc-broker-1"
    assert mapper.principal("CN=z") == "User:CN=z"


def test_list_form_and_default() -> None:
    assert PrincipalMapper(["RULE:^CN=(.*)$/$1/", "DEFAULT"]).name("CN=a") == "a"
    assert PrincipalMapper().name("CN=a,O=b") == "CN=a,O=b"
    assert PrincipalMapper(None).name("CN=a") == "CN=a"


def test_escaped_slash_and_named_groups() -> None:
    mapper = PrincipalMapper(r"RULE:^CN=(?P<who>[^,]+),OU=(.*)$/${who}\/$2/,RULE:^O=a\/b$/slashed/")
    assert mapper.name("CN=x,OU=y") == "x/y"
    assert mapper.name("O=a/b") == "slashed"
    assert str(mapper.rules[1]) == r"RULE:^O=a\/b$/slashed/"


def test_first_matching_rule_wins_and_regex_must_match_whole_dn() -> None:
    mapper = PrincipalMapper("RULE:CN=(.*?),OU=A/first-$1/,RULE:.*CN=([^,]*).*/second-$1/")
    assert mapper.name("CN=x,OU=A") == "first-x"
    assert mapper.name("CN=x,OU=AB") == "second-x"  # the first needs a whole-DN match


def test_no_matching_rule_is_an_error() -> None:
    with pytest.raises(NoMatchingRuleError):
        PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/").name("CN=x,OU=Other")


def test_missing_group_in_replacement_is_an_error() -> None:
    with pytest.raises(NoMatchingRuleError):
        PrincipalMapper("RULE:^CN=(.*)$/$2/").name("CN=x")


@pytest.mark.parametrize("rules", [
    # Kafka's SslPrincipalMapperTest invalid rules
    "DEFAULT/L",
    "DEFAULT/U",
    "RULE:/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/L",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU",
    "RULE:^CN=(.*?)$/$1/X",
    "RULE:^CN=(.*$/$1/",  # bad regex
    "SOMETHING",
    "",
    " , ",
])
def test_invalid_rules(rules: str) -> None:
    with pytest.raises(InvalidRuleError):
        parse_rules(rules)
