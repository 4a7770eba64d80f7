"""corral.peers: which peer a connection counts against, and the places it holds."""

from __future__ import annotations

from corral.peers import LOCAL, LOOPBACK, Places, peer_key


def test_every_loopback_address_is_one_peer() -> None:
    for peer in (("127.0.0.1", 1), ("127.9.9.9", 2), ("::1", 3, 0, 0), ("::ffff:127.0.0.5", 4)):
        assert peer_key(peer) == LOOPBACK
    assert peer_key(("10.0.0.7", 5)) == "10.0.0.7"
    assert peer_key(("::ffff:10.0.0.7", 6, 0, 0)) == "10.0.0.7"  # IPv4 inside IPv6
    assert peer_key("") == LOCAL and peer_key(None) == LOCAL  # a Unix socket


def test_places_are_bounded_per_peer_and_in_all() -> None:
    places = Places(per_peer=2, total=3)
    assert places.take("a") == "" and places.take("a") == ""
    assert "from a (2; at most 2)" in places.take("a")
    assert places.take("b") == ""
    assert "(3; at most 3)" in places.take("c")
    places.give_back("a")
    assert places.take("c") == ""
    assert places.count == 3 and places.held == {"a": 1, "b": 1, "c": 1}


def test_a_flood_is_logged_once_per_peer_now_and_then() -> None:
    places = Places(per_peer=1, total=1)
    logged = [places.turned_away("a", t) for t in (0.0, 1.0, 5.0, 10.5)]
    assert logged == [True, False, False, True] and places.refused == 4
