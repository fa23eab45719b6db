"""`prover.by_identity.ByIdentity`: answers kept by the identity of the object asked about."""

from __future__ import annotations

from prover.by_identity import ByIdentity


def test_an_answer_is_for_that_very_object_and_extra():
    memo: ByIdentity[str] = ByIdentity(8)
    a = tuple(range(300))
    assert memo.get(a) is None
    assert memo.put(a, "a") == "a" and memo.get(a) == "a"
    assert memo.get(tuple(list(a))) is None  # equal, but another object
    assert memo.get(a, (1, 2)) is None  # another extra
    memo.put(a, "a12", (1, 2))
    assert memo.get(a, (1, 2)) == "a12" and memo.get(a) == "a"


def test_an_entry_keeps_its_object_so_its_id_is_not_taken_by_another():
    memo: ByIdentity[int] = ByIdentity(8)
    memo.put([1, 2, 3], 6)  # the list lives on in the entry
    other = [4, 5]
    assert memo.get(other) is None  # never the list's answer, whatever the ids


def test_a_full_memo_starts_over():
    memo: ByIdentity[int] = ByIdentity(4)
    keep = [tuple([i]) for i in range(10)]
    for i, k in enumerate(keep):
        memo.put(k, i)
        assert len(memo) <= 4
    assert memo.get(keep[-1]) == 9 and memo.get(keep[0]) is None
