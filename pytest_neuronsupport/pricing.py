"""On-demand hourly prices of the instance types the Trn1 performance tables use, with their
source: only figures we can source are in the table.

Source: AWS Neuron documentation, "Trn1/Trn1n Inference Performance" (last update April 30th,
2024): its decoder tables list trn1.32xlarge's "On-Demand hourly rate" as $21.50; its encoder
tables' costs imply $1.34 an hour for trn1.2xlarge (3098.91 inferences/s at $0.120 per 1M
inferences, $1.34 / 3600 / 3098.91 * 1e6 = $0.120). Prices change and other instance types are
not listed: ``--neuron-price-per-hour`` gives any price (and overrides the table).
"""

from __future__ import annotations

from typing import Final

#: Dollars per hour, on demand.
PRICES: Final[dict[str, float]] = {
    "trn1.2xlarge": 1.34,
    "trn1.32xlarge": 21.50,
}
PRICE_SOURCE: Final = "AWS Neuron docs, Trn1/Trn1n Inference Performance (April 2024)"


def price(per_hour: float | None, instance: str | None) -> tuple[float, str] | None:
    """The hourly price and where it comes from: the given one wins over the instance's."""
    if per_hour is not None:
        return per_hour, "--neuron-price-per-hour"
    if instance is not None:
        return PRICES[instance], f"{instance}: {PRICE_SOURCE}"
    return None
