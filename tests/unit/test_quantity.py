from decimal import Decimal

import pytest

from ch_launcher.kubevirt.quantity import format_bytes, parse_quantity, quantity_bytes, quantity_millis


@pytest.mark.parametrize("text,expected", [
    ("1024M", 1_024_000_000), ("2Gi", 2 * 2**30), ("128Mi", 128 * 2**20), ("1.5G", 1_500_000_000),
    ("1e3", 1000), ("64", 64), (512, 512), ("0.5Ki", 512),
])
def test_memory_quantities_are_read_as_kubernetes_reads_them(text, expected):
    assert quantity_bytes(text) == expected


def test_fractional_bytes_round_up_like_kubernetes_value():
    assert quantity_bytes("1.5") == 2


def test_cpu_millis():
    assert quantity_millis("500m") == 500
    assert quantity_millis("2") == 2000


@pytest.mark.parametrize("bad", ["", "12X", "Gi", "1..2", "ten", True, None, [1], float("inf"), float("nan"),
                                 "1e999999999", "1e-999999999", "1e999998", 10**70, "\u0661Gi"])
def test_malformed_quantities_are_a_value_error_naming_the_text(bad):
    with pytest.raises(ValueError):
        parse_quantity(bad)


def test_format_bytes_prefers_the_largest_exact_binary_unit():
    assert format_bytes(2**30) == "1Gi"
    assert format_bytes(290 * 2**20) == "290Mi"
    assert format_bytes(1000) == "1000"
    assert parse_quantity("1Ki") == Decimal(1024)
