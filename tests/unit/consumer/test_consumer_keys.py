"""API keys: the two configuration forms, key names, their errors, and lookups that show
no token."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.consumer.keys import SHORT_TOKEN, Key, KeyConfigError, build, load, parse

pytestmark = pytest.mark.unit

TOKEN_A = "tok-a-0123456789abcdef"
TOKEN_B = "tok-b-0123456789abcdef"
TOKEN_C = "tok-c-0123456789abcdef"


def test_the_environment_form_maps_each_token_to_its_tenant() -> None:
    keys = load(f" {TOKEN_A}=tenant-a , {TOKEN_B}=tenant-b,", None)
    assert keys is not None
    assert keys.key_for(TOKEN_A) == Key("tenant-a")
    assert keys.key_for(TOKEN_B) == Key("tenant-b")
    assert keys.key_for("tok-c") is None
    assert keys.key_for(TOKEN_A[:-1]) is None
    assert keys.key_for(TOKEN_A + "x") is None
    assert keys.key_for("") is None
    assert keys.tenants == {"tenant-a", "tenant-b"}


def test_a_key_may_name_who_holds_it_within_its_tenant() -> None:
    keys = load(f"{TOKEN_A}=tenant-a#alice, {TOKEN_B}=tenant-a#bob.smith@example.org,"
                f"{TOKEN_C}=org:acme/eu", None)
    assert keys is not None
    assert keys.key_for(TOKEN_A) == Key("tenant-a", "alice")
    assert keys.key_for(TOKEN_B) == Key("tenant-a", "bob.smith@example.org")
    assert keys.key_for(TOKEN_C) == Key("org:acme/eu")  # ':' and '/' stay the tenant's
    assert keys.tenants == {"tenant-a", "org:acme/eu"}
    assert [str(k) for _, k in keys.entries] == [
        "tenant-a#alice", "tenant-a#bob.smith@example.org", "org:acme/eu"]


def test_a_longest_name_fits_a_longest_tenant_in_the_default_id_length() -> None:
    tenant, name = "t" * 128, "n" * 127
    keys = load(f"{TOKEN_A}={tenant}#{name}", None)
    assert keys is not None
    assert len(str(keys.key_for(TOKEN_A))) == 256


def test_a_token_may_end_in_base64_padding() -> None:
    keys = load("YWJjZGVmZ2hpamtsbW5vcA===acme", None)
    assert keys is not None
    assert keys.key_for("YWJjZGVmZ2hpamtsbW5vcA==") == Key("acme")


def test_the_file_form_takes_both_separators_comments_and_blank_lines(tmp_path: Path) -> None:
    file = tmp_path / "keys"
    file.write_text(f"# production keys\n\n{TOKEN_A} tenant-a\n  {TOKEN_B}=tenant-b  \n"
                    "YWJjZGVmZ2hpamtsbW5vcA== acme\n#alice's key\n"
                    f"{TOKEN_C} tenant-a#alice\nZGVmZ2hpamtsbW5vcHFy===acme#ci\n", "utf-8")
    keys = load(None, file)
    assert keys is not None
    assert keys.key_for(TOKEN_A) == Key("tenant-a")
    assert keys.key_for(TOKEN_B) == Key("tenant-b")
    assert keys.key_for(TOKEN_C) == Key("tenant-a", "alice")
    assert keys.key_for("ZGVmZ2hpamtsbW5vcHFy==") == Key("acme", "ci")
    assert keys.key_for("YWJjZGVmZ2hpamtsbW5vcA==") == Key("acme")


def test_environment_and_file_are_used_together(tmp_path: Path) -> None:
    file = tmp_path / "keys"
    file.write_text(f"{TOKEN_B} tenant-b\n", "utf-8")
    keys = load(f"{TOKEN_A}=tenant-a", file)
    assert keys is not None
    assert keys.tenants == {"tenant-a", "tenant-b"}


@pytest.mark.parametrize("value", [None, "", " , ,"])
def test_no_keys_means_authentication_is_off(value: str | None) -> None:
    assert load(value, None) is None


@pytest.mark.parametrize(
    ("text", "lines", "where"),
    [
        ("secret-token-value", False, "AGUI_API_KEYS entry 1"),
        ("ok-token=tenant-a,secret-token-value=", False, "AGUI_API_KEYS entry 2"),
        ("=tenant-a", False, "AGUI_API_KEYS entry 1"),
        ("secret token=tenant-a", False, "AGUI_API_KEYS entry 1"),
        ("secret-token-value=tenant a", False, "AGUI_API_KEYS entry 1"),
        ("secret-token-value=-tenant", False, "AGUI_API_KEYS entry 1"),
        ("# c\nsecret-token-value tenant-a extra\n", True, "f line 2"),
        ("secret-token-value\n", True, "f line 1"),
        ("secret-token-value=tenant-a#", False, "AGUI_API_KEYS entry 1"),
        ("secret-token-value=#alice", False, "AGUI_API_KEYS entry 1"),
        ("ok-token=tenant-a#alice,secret-token-value=tenant-a#al ice", False,
         "AGUI_API_KEYS entry 2"),
        ("secret-token-value=tenant-a#alice#bob", False, "AGUI_API_KEYS entry 1"),
        ("secret-token-value=tenant-a#-alice", False, "AGUI_API_KEYS entry 1"),
        (f"secret-token-value=tenant-a#{'n' * 128}", False, "AGUI_API_KEYS entry 1"),
        ("# c\nsecret-token-value tenant-a#\n", True, "f line 2"),
    ],
)
def test_a_bad_entry_is_refused_naming_where_never_what(text: str, lines: bool,
                                                        where: str) -> None:
    source = "f" if lines else "AGUI_API_KEYS"
    with pytest.raises(KeyConfigError) as err:
        list(parse(text, source, lines=lines))
    assert str(err.value).startswith(where)
    assert "secret" not in str(err.value)


def test_one_token_for_two_tenants_is_refused_without_showing_it() -> None:
    with pytest.raises(KeyConfigError) as err:
        load(f"{TOKEN_A}=tenant-a,{TOKEN_A}=tenant-b", None)
    assert TOKEN_A not in str(err.value)
    assert "tenant-a" in str(err.value)
    with pytest.raises(KeyConfigError) as named:
        load(f"{TOKEN_A}=tenant-a#alice,{TOKEN_A}=tenant-a#bob", None)
    assert "'tenant-a#alice' and 'tenant-a#bob'" in str(named.value)
    keys = load(f"{TOKEN_A}=tenant-a,{TOKEN_A}=tenant-a", None)  # a harmless repeat
    assert keys is not None
    assert len(keys.entries) == 1


def test_an_unreadable_or_empty_file_stops_the_service(tmp_path: Path) -> None:
    with pytest.raises(KeyConfigError, match="AGUI_API_KEYS_FILE"):
        load(None, tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.write_text("# nothing yet\n", "utf-8")
    with pytest.raises(KeyConfigError, match="names no key"):
        load(None, empty)


def test_short_tokens_are_reported_by_tenant() -> None:
    keys = build([("x" * (SHORT_TOKEN - 1), Key("weak")), ("y" * SHORT_TOKEN, Key("fine")),
                  ("z" * (SHORT_TOKEN - 1), Key("weak", "bob"))])
    assert keys.short == ("weak", "weak#bob")


def test_nothing_kept_shows_a_token() -> None:
    keys = build([(TOKEN_A, Key("tenant-a", "alice"))])
    shown = repr(keys) + str(keys) + repr(keys.entries)
    assert TOKEN_A not in shown
    assert TOKEN_A.encode() not in b"".join(d for d, _ in keys.entries)


TOKENS = st.text(st.characters(codec="ascii", categories=["L", "N", "P", "S"]),
                 min_size=1, max_size=40)


@given(pairs=st.dictionaries(TOKENS, st.sampled_from(["t1", "t2", "t3"]), max_size=6),
       probe=TOKENS)
def test_lookup_finds_exactly_the_configured_tenant(pairs: dict[str, str], probe: str) -> None:
    keys = build((token, Key(tenant)) for token, tenant in pairs.items())
    for token, tenant in pairs.items():
        assert keys.key_for(token) == Key(tenant)
    assert keys.key_for(probe) == (Key(pairs[probe]) if probe in pairs else None)


def test_a_keys_file_written_with_a_byte_order_mark_reads_its_first_line(tmp_path: Path) -> None:
    """The BOM was read as the first token's first character: that key never matched,
    and a file starting ``# tenants`` named a tenant ``tenants`` (found by probing)."""
    path = tmp_path / "keys"
    path.write_bytes("\ufeffbomtoken-0123456789abc tenant-a#bom\r\n".encode()
                     + b"other-0123456789abcdef tenant-b\r\n")
    keys = load(None, path)
    assert keys is not None
    assert keys.key_for("bomtoken-0123456789abc") == Key("tenant-a", "bom")
    commented = tmp_path / "commented"
    commented.write_bytes("\ufeff# tenants\nother-0123456789abcdef tenant-b\n".encode())
    again = load(None, commented)
    assert again is not None
    assert again.tenants == {"tenant-b"}


@pytest.mark.parametrize("token", ["tök-0123456789abcdef", "tok\u20ac-0123456789abc",
                                   "tok\x7f-0123456789abcdef"])
def test_a_token_a_header_cannot_carry_as_configured_is_refused_at_start(token: str) -> None:
    """A header carries bytes: a token past ASCII matched only when sent as Latin-1, one
    past Latin-1 never (found by probing)."""
    with pytest.raises(KeyConfigError, match="printable ASCII"):
        load(f"{token}=tenant-u", None)
