"""fn.* chain math (sql/functions/3x_*.sql) against the public anchors, Go-generated vectors and an
independent Python reference written from the Go code of gonka-ai/gonka (docs/chain-math.md)."""
from __future__ import annotations

import json
from decimal import ROUND_DOWN, Decimal
from fractions import Fraction
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

DATA = Path(__file__).resolve().parents[1] / "cases" / "data"
NEWEST = "v0.2.18"

# ---------------------------------------------------------------- reference (Python, from the Go sources)


def div_round(a: Fraction, b: Fraction, prec: int) -> Fraction:
    """shopspring DivRound: exact quotient, half away from zero at prec places."""
    q = Fraction(a) / Fraction(b) * 10**prec
    n = abs(q.numerator) // q.denominator
    if abs(q) - n >= Fraction(1, 2):
        n += 1
    return Fraction(n if q >= 0 else -n, 10**prec)


def round_half_away(x: Fraction, prec: int) -> Fraction:
    return div_round(x, Fraction(1), prec)


def _load_tables() -> dict:
    return json.loads((DATA / "missed_stat_tables.json").read_text())


TABLES = _load_tables()


def ref_lookup(missed: int, total: int, family: str, permille: int) -> bool:
    if total > 990:
        if family == "legacy":
            return missed * 10 <= total
        num, den = {50: (1, 20), 100: (1, 10), 200: (1, 5), 300: (3, 10), 400: (2, 5), 500: (1, 2)}[permille]
        return missed * den <= total * num
    table = TABLES["legacy"] if family == "legacy" else TABLES[family][f"P{permille // 10:03d}"]
    crit = None
    for t, c in table:
        if t <= total:
            crit = c
    return True if crit is None else missed <= crit


def ref_pow(base: Fraction, e: int, prec: int) -> Fraction:
    if e == 0:
        return Fraction(1)
    if e == 1:
        return base
    return round_half_away(base**e, prec)


def ref_binomial_p(k: int, n: int, p0: Fraction, prec: int = 16) -> Fraction:
    if k == 0:
        return Fraction(1)
    q0 = 1 - p0
    if k == n:
        prob = ref_pow(p0, n, prec)
    else:
        coeff = Fraction(1)
        for i in range(k):
            coeff = div_round(coeff * (n - i), Fraction(i + 1), 16)
        prob = coeff * ref_pow(p0, k, prec) * ref_pow(q0, n - k, prec)
    total = prob
    ratio = div_round(p0, q0, 16)
    for i in range(k, n):
        prob = prob * div_round(Fraction(n - i), Fraction(i + 1), 16) * ratio
        total += prob
    return round_half_away(total, prec)


def ref_missed_stat_test(missed: int, total: int, p0: Decimal, version: int) -> bool:
    """version: 3 = v0.2.2..v0.2.5 (legacy), 7 = v0.2.6..v0.2.9, 11 = v0.2.10 on."""
    if total == 0:
        return True
    if missed < 0 or total < 0 or missed > total:
        raise ValueError("invalid input")
    if version < 7:
        return ref_lookup(missed, total, "legacy", 100)
    permille = int((p0 * 1000).to_integral_value(rounding=ROUND_DOWN))
    if permille in (50, 100, 200, 300, 400, 500):
        return ref_lookup(missed, total, "v0.2.10" if version >= 11 else "v0.2.6", permille)
    p = Fraction(p0)
    if not 0 < p < 1:
        raise ValueError("p0 must be in (0, 1)")
    return ref_binomial_p(missed, total, p) >= Fraction(1, 20)


LN10 = Fraction(Decimal("2.302585092994045684017991454684364207601101488628772976033327900967572609677"))


def ref_exp_taylor(d: Fraction, prec: int) -> Fraction:
    """shopspring ExpTaylor(prec), prec >= 0."""
    if d == 0:
        return Fraction(1)
    eps = Fraction(1, 10 ** (prec + 1))
    pw, fact, result, i = abs(d), 1, Fraction(1), 1
    while True:
        step = div_round(pw, Fraction(fact), prec + 1)
        result += step
        if step < eps:
            break
        pw *= abs(d)
        i += 1
        fact *= i
    if d < 0:
        result = div_round(Fraction(1), result, prec + 1)
    return round_half_away(result, prec)


def ref_ln(d: Fraction, prec: int = 12) -> Fraction:
    """shopspring Decimal.Ln(prec), step by step (the float64 first guess from the C library's log)."""
    import math

    calc = prec + 2
    eps = Fraction(1, 10**calc)
    z, adjust, series = d, Fraction(0), False
    comp1 = z - 1
    if abs(comp1) <= Fraction(1, 10):
        series = True
    else:
        shift = 0
        while z / Fraction(10) ** shift >= 1:
            shift += 1
        while z / Fraction(10) ** shift < Fraction(1, 10):
            shift -= 1
        z = z / Fraction(10) ** shift
        idx, pp = (1 if calc >= 1 else 0), calc
        while pp >= 16:
            pp //= 16
            idx += 4
        while pp >= 2:
            pp //= 2
            idx += 1
        digits = (1 << idx) - 1
        adjust = shift * Fraction(int(LN10 * 10**digits), 10**digits)  # truncated approximation
        comp1 = z - 1
        if abs(comp1) <= Fraction(1, 10):
            series = True
        else:
            comp1 = Fraction(Decimal(repr(math.log(float(z)))))
    if series:
        c3 = div_round(comp1, comp1 + 2, calc)
        comp1 = c3 + c3
        c2 = comp1
        n = 1
        while True:
            c2 = c2 * c3 * c3
            c4 = div_round(c2, Fraction(2 * n + 1), calc)
            comp1 += c4
            if abs(c4) <= eps:
                break
            n += 1
    else:
        prev = Fraction(0)
        for _ in range(calc * 2 + 10):
            e = ref_exp_taylor(comp1, calc)
            step = div_round(2 * (e - z), e + z, calc)
            comp1 -= step
            if prev + step == 0 or abs(step) <= eps:
                break
            prev = step
    return round_half_away(comp1 + adjust, prec)


def ref_ln12(x: Fraction) -> Fraction:
    return ref_ln(x, 12)


def ref_log_terms(p0: Fraction, p1: Fraction) -> tuple[Fraction, Fraction]:
    return ref_ln12(div_round(p1, p0, 16)), ref_ln12(div_round(1 - p1, 1 - p0, 16))


def ref_reward_table(epochs: int, initial: int) -> int:
    if epochs == 0:
        return initial
    return int(initial * Fraction(Decimal("0.9995251127946402")) ** epochs)  # floor of a positive value


# ---------------------------------------------------------------- helpers


def one(conn, sql: str, *params):
    return conn.execute(sql, params).fetchone()[0]


def fails(conn, sql: str, *params) -> str:
    with pytest.raises(psycopg.Error) as err:
        conn.execute(sql, params)
    return str(err.value)


@pytest.fixture(scope="module")
def mconn(pg_admin_url, template_db):
    """One migrated database for the many read-only calls of this module."""
    from indexer.db.scratch import scratch_database

    with scratch_database(pg_admin_url, "indexer_cm", template=template_db) as url:
        with psycopg.connect(url, autocommit=True) as c:
            yield c


# ---------------------------------------------------------------- public anchors (gonkalabs GRC-E366)


def test_anchor_sprt_llr_25_of_263(conn):
    llr = one(conn, "SELECT fn.sprt_llr(25, 263, 0.05, 0.10)")
    assert round(llr, 2) == Decimal("4.46")
    assert llr == 25 * Decimal("0.693147180560") + 238 * Decimal("-0.054067221270")
    assert llr >= 4  # crosses H = 4


def test_anchor_epoch_366_reward(conn):
    reward = one(conn, "SELECT fn.theoretical_epoch_reward(366, 323000000000000, -0.000475, 1)")
    assert reward == 271_585_585_901_857


def test_anchor_reward_share(conn):
    share = one(conn, "SELECT fn.reward_share(271585585901857, 57537, 415488)")
    assert share == 37_609_316_890_103
    assert round(share / Decimal(10**9), 6) == Decimal("37609.316890")


# ---------------------------------------------------------------- versions


def test_chain_versions_listed_and_unknown_rejected(conn):
    rows = conn.execute("SELECT chain_version, git_commit FROM fn.chain_versions() ORDER BY ordinal").fetchall()
    assert rows[0][0] == "v0.2.0" and rows[-1][0] == NEWEST
    assert all(len(c) == 40 for _, c in rows)
    assert "unknown chain version" in fails(conn, "SELECT fn.missed_stat_test(1, 10, 0.1, 'v9.9.9')")
    assert one(conn, "SELECT fn.missed_stat_test(1, 10, 0.1, '0.2.10')") is True


def test_float_era_reward_differs_from_table_era(conn):
    old = one(conn, "SELECT fn.theoretical_epoch_reward(366, 323000000000000, -0.000475, 1, 'v0.2.7')")
    assert old == 271_585_585_901_851  # math.Exp era: 0.8408222473741529 * 323000e9, truncated
    assert one(conn, "SELECT fn.theoretical_epoch_reward(366, 323000000000000, -0.000475, 1, 'v0.2.8')") \
        == 271_585_585_901_857


# ---------------------------------------------------------------- MissedStatTest


@pytest.mark.parametrize("missed,total,p0,version,expected", [
    (0, 0, "0.10", NEWEST, True), (5, 0, "0.10", NEWEST, True),       # total = 0 passes before any check
    (0, 1, "0.10", NEWEST, True), (1, 1, "0.10", NEWEST, True),       # below the first row
    (2, 2, "0.10", "v0.2.9", False), (2, 2, "0.10", "v0.2.10", True),  # P010 n <= 10 relaxed in v0.2.10
    (4, 10, "0.10", "v0.2.10", True), (5, 10, "0.10", "v0.2.10", False),
    (114, 990, "0.10", NEWEST, True), (115, 990, "0.10", NEWEST, False),
    (116, 990, "0.10", "v0.2.5", True), (117, 990, "0.10", "v0.2.5", False),
    (99, 991, "0.10", NEWEST, True), (100, 991, "0.10", NEWEST, False),
    (50, 1000, "0.05", NEWEST, True), (51, 1000, "0.05", NEWEST, False),
    (3, 10, "0.1009", NEWEST, True),                                   # floor(100.9) = 100: the P010 table
    (4, 10, "0.99", "v0.2.5", True), (5, 10, "0.99", "v0.2.5", False),  # legacy: p0 ignored
])
def test_missed_stat_test_cases(conn, missed, total, p0, version, expected):
    got = one(conn, "SELECT fn.missed_stat_test(%s, %s, %s::numeric, %s)", missed, total, p0, version)
    assert got is expected


def test_missed_stat_test_errors(conn):
    assert "invalid input" in fails(conn, "SELECT fn.missed_stat_test(-1, 10, 0.1)")
    assert "invalid input" in fails(conn, "SELECT fn.missed_stat_test(11, 10, 0.1)")
    assert "p0 must be in (0, 1)" in fails(conn, "SELECT fn.missed_stat_test(1, 10, 0)")
    assert "p0 must be in (0, 1)" in fails(conn, "SELECT fn.missed_stat_test(1, 10, 1.5)")
    assert "no MissedStatTest" in fails(conn, "SELECT fn.missed_stat_test(1, 10, 0.1, 'v0.2.1')")


def test_missed_stat_test_huge_counts(conn):
    big = 9_000_000_000_000_000
    assert one(conn, "SELECT fn.missed_stat_test(%s, %s, 0.10)", big // 10, big) is True
    assert one(conn, "SELECT fn.missed_stat_test(%s, %s, 0.10)", big // 10 + 1, big) is False
    huge = 9_000_000_000_000_000_000  # missed * 10 overflows int64 in Go and wraps negative: passes at 10.3 %
    assert one(conn, "SELECT fn.missed_stat_test(%s, %s, 0.10)", 930_000_000_000_000_000, huge) is True
    assert one(conn, "SELECT fn.missed_stat_test(0, %s, 0.10)", big) is True


@pytest.mark.parametrize("p0", ["0.15", "0.07", "0.33", "0.6", "0.049"])
def test_binomial_fallback_boundary(mconn, p0):
    """Off-table p0: the largest passing miss count is where the reference p-value drops below 0.05."""
    total = 60
    p = Fraction(Decimal(p0))
    for missed in range(0, total + 1):
        expected = ref_binomial_p(missed, total, p) >= Fraction(1, 20)
        got = one(mconn, "SELECT fn.missed_stat_test(%s, %s, %s::numeric)", missed, total, p0)
        assert got is expected, (missed, total, p0)


def test_binomial_p_value_matches_reference(mconn):
    for k, n, p0 in [(1, 1, "0.3"), (3, 7, "0.15"), (7, 7, "0.15"), (12, 40, "0.123"), (0, 5, "0.2"),
                     (30, 200, "0.11"), (150, 400, "0.37")]:
        got = one(mconn, "SELECT fn.missed_binomial_p_value(%s, %s, %s::numeric)", k, n, p0)
        assert Fraction(got) == ref_binomial_p(k, n, Fraction(Decimal(p0))), (k, n, p0)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(total=st.integers(0, 2500), frac=st.fractions(0, 1),
       p0=st.sampled_from(["0.05", "0.10", "0.20", "0.30", "0.40", "0.50", "0.0501", "0.1999", "0.5009"]),
       version=st.sampled_from([("v0.2.4", 3), ("v0.2.7", 7), ("v0.2.10", 11), (NEWEST, 19)]))
def test_missed_stat_test_tables_vs_reference(mconn, total, frac, p0, version):
    missed = int(total * frac)
    got = one(mconn, "SELECT fn.missed_stat_test(%s, %s, %s::numeric, %s)", missed, total, p0, version[0])
    assert got is ref_missed_stat_test(missed, total, Decimal(p0), version[1])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(total=st.integers(1, 120), frac=st.fractions(0, 1), p0_milli=st.integers(1, 999))
def test_missed_stat_test_fallback_vs_reference(mconn, total, frac, p0_milli):
    p0 = Decimal(p0_milli) / 1000 + Decimal("0.0003")
    missed = int(total * frac)
    got = one(mconn, "SELECT fn.missed_stat_test(%s, %s, %s::numeric)", missed, total, str(p0))
    assert got is ref_missed_stat_test(missed, total, p0, 14)


def test_downtime_p0(conn):
    q = "SELECT p0, skip_punishment FROM fn.downtime_p0(%s, %s, %s, %s::numeric, %s)"
    assert conn.execute(q, (5000, 100, 10, "0.10", NEWEST)).fetchone() == (Decimal("0.100"), False)
    assert conn.execute(q, (5000, 1000, 10, "0.10", NEWEST)).fetchone() == (Decimal("0.300"), False)
    assert conn.execute(q, (5000, 2400, 10, "0.10", NEWEST)).fetchone() == (Decimal("0.500"), True)
    assert conn.execute(q, (999, 500, 10, "0.12", NEWEST)).fetchone() == (Decimal("0.200"), False)  # gate
    assert conn.execute(q, (5000, 100, 10, "0.12", "v0.2.9")).fetchone() == (Decimal("0.12"), False)


# ---------------------------------------------------------------- SPRT


def test_go_ln_matches_go_vectors(mconn):
    rows = [line.split() for line in (DATA / "go_sprt_ln_vectors.txt").read_text().splitlines()
            if not line.startswith("#")]
    got = mconn.execute(
        "SELECT t.log_fail, t.log_pass FROM unnest(%s::numeric[], %s::numeric[]) AS v(p0, p1), "
        "LATERAL fn.sprt_log_terms(v.p0, v.p1, 'v0.2.10') t",
        ([r[0] for r in rows], [r[1] for r in rows])).fetchall()
    for r, (lf, lp) in zip(rows, got):
        assert (lf, lp) == (Decimal(r[2]), Decimal(r[3])), r


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(p0=st.integers(1, 9999), p1=st.integers(1, 9999))
def test_sprt_log_terms_vs_reference(mconn, p0, p1):
    d0, d1 = Fraction(p0, 10000), Fraction(p1, 10000)
    lf, lp = mconn.execute("SELECT * FROM fn.sprt_log_terms(%s, %s)",
                           (Decimal(p0) / 10000, Decimal(p1) / 10000)).fetchone()
    assert (Fraction(lf), Fraction(lp)) == ref_log_terms(d0, d1)


def test_sprt_edges_by_version(conn):
    assert "must be in (0,1)" in fails(conn, "SELECT fn.sprt_llr(1, 10, 0, 0.1, 'v0.2.10')")
    assert one(conn, "SELECT fn.sprt_llr(1, 10, 0, 0.1, 'v0.2.11')") == 9 * one(
        conn, "SELECT log_pass FROM fn.sprt_log_terms(0, 0.1, 'v0.2.11')")
    assert one(conn, "SELECT log_pass FROM fn.sprt_log_terms(0.05, 1, 'v0.2.11')") == 0
    assert "between 0 and 1" in fails(conn, "SELECT fn.sprt_llr(1, 10, 0.05, 1.2)")
    assert "no invalidation SPRT" in fails(conn, "SELECT fn.sprt_llr(1, 10, 0.05, 0.1, 'v0.2.4')")
    assert "invalid input" in fails(conn, "SELECT fn.sprt_llr(11, 10, 0.05, 0.1)")
    assert one(conn, "SELECT fn.sprt_llr(0, 0, 0.05, 0.1)") == 0


def test_sprt_trajectory_crossing_mid_epoch(conn):
    # 6 invalidations first (6 * 0.693 = 4.16 >= 4), then 60 validations pull the final ratio far below 4.
    outcomes = [True] * 6 + [False] * 60
    row = conn.execute("SELECT * FROM fn.sprt_trajectory(%s, 0.05, 0.10, 4)", (outcomes,)).fetchone()
    max_llr, crossed, crossed_at, final_llr, chain_llr = row
    assert crossed is True and crossed_at == 6
    assert chain_llr == max_llr == 6 * Decimal("0.693147180560")
    assert final_llr == one(conn, "SELECT fn.sprt_llr(6, 66, 0.05, 0.10)") and final_llr < 4
    # Same counts, validations first: never crosses.
    row = conn.execute("SELECT * FROM fn.sprt_trajectory(%s, 0.05, 0.10, 4)", ([False] * 60 + [True] * 6,)).fetchone()
    assert row[1] is False and row[2] is None and row[3] == row[4] == final_llr
    empty = conn.execute("SELECT * FROM fn.sprt_trajectory('{}', 0.05, 0.10, 4)").fetchone()
    assert empty == (None, False, None, 0, 0)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(outcomes=st.lists(st.booleans(), max_size=80), h=st.sampled_from(["2", "4", "4.46", "6.9"]))
def test_sprt_trajectory_vs_reference(mconn, outcomes, h):
    lf, lp = ref_log_terms(Fraction(1, 20), Fraction(1, 10))
    llr, mx, crossed_at = Fraction(0), None, None
    for i, o in enumerate(outcomes, 1):
        llr += lf if o else lp
        mx = llr if mx is None else max(mx, llr)
        if crossed_at is None and llr >= Fraction(Decimal(h)):
            crossed_at = i
    row = mconn.execute("SELECT * FROM fn.sprt_trajectory(%s, 0.05, 0.10, %s::numeric)", (outcomes, h)).fetchone()
    assert (None if row[0] is None else Fraction(row[0])) == mx
    assert row[1] is (crossed_at is not None) and row[2] == crossed_at and Fraction(row[3]) == llr


# ---------------------------------------------------------------- epoch reward


def test_go_math_exp_matches_go_vectors(mconn):
    rows = [line.split() for line in (DATA / "go_math_exp_vectors.txt").read_text().splitlines()
            if not line.startswith("#")]
    got = mconn.execute(
        "SELECT fn.f64_shortest(fn.go_math_exp((v.d * v.n)::float8)) "
        "FROM unnest(%s::numeric[], %s::numeric[]) WITH ORDINALITY AS v(d, n, i) ORDER BY i",
        ([r[0] for r in rows], [r[1] for r in rows])).fetchall()
    mismatches = [(r, g[0]) for r, g in zip(rows, got) if Decimal(r[2]) != g[0]]
    assert not mismatches, mismatches[:5]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(epoch=st.integers(1, 3000), initial=st.integers(1, 10**15), genesis=st.integers(0, 1))
def test_table_era_reward_vs_reference(mconn, epoch, initial, genesis):
    got = one(mconn, "SELECT fn.theoretical_epoch_reward(%s, %s, -0.000475, %s)", epoch, initial, genesis)
    assert got == ref_reward_table(epoch - genesis, initial)


def test_reward_edges(conn):
    q = "SELECT fn.theoretical_epoch_reward(%s, %s, %s::numeric, %s, %s)"
    assert one(conn, q, 1, 323000000000000, "-0.000475", 1, NEWEST) == 323000000000000   # epochs = 0
    assert one(conn, q, 50, 0, "-0.000475", 1, NEWEST) == 0
    assert one(conn, q, 50, 1000, None, 1, NEWEST) == 1000                                  # nil DecayRate
    assert one(conn, q, 50, 10**15, "0", 1, NEWEST) == 10**15
    assert "unsupported decay rate" in fails(conn, q.replace("%s::numeric", "-0.0005"), 50, 10**15, 1, NEWEST)
    assert "exponent overflow" in fails(conn, q, 0, 10**15, "-0.000475", 1, NEWEST)        # uint64 wrap
    # float era: epoch before genesis wraps to -1 epochs, i.e. a growth of exp(+0.000475)
    assert one(conn, q, 0, 10**15, "-0.000475", 1, "v0.2.7") > 10**15
    assert "not a uint64" in fails(conn, q, 5, -1, "-0.000475", 1, NEWEST)


def test_reward_share_edges(conn):
    assert one(conn, "SELECT fn.reward_share(1000, 1, 3)") == 333
    assert one(conn, "SELECT fn.reward_share(1000, 5, 0)") == 0
    assert one(conn, "SELECT fn.reward_share(1000, 0, 5)") == 0
