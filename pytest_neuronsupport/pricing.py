"""On-demand hourly prices of the instance types the seed's tables use, with their source.

Source: AWS, "Amazon EC2 On-Demand Pricing" (https://aws.amazon.com/ec2/pricing/on-demand/),
US East (N. Virginia), Linux, as listed in 2024; the seed's tables use the same figures
(trn1.32xlarge at $21.50). Prices change: ``--neuron-price-per-hour`` overrides the table.

To verify: only trn1.32xlarge ($21.50, the seed's "On-Demand hourly rate") and trn1.2xlarge
($1.34, which the seed's encoder costs imply: 3098.91 inferences/s at $0.120 per 1M) are
checked against the seed; the other figures were not checked against AWS's page.
"""

from __future__ import annotations

from typing import Final

#: Dollars per hour, on demand.
PRICES: Final[dict[str, float]] = {
    "trn1.2xlarge": 1.34,
    "trn1.32xlarge": 21.50,
    "trn1n.32xlarge": 24.78,
    "inf2.xlarge": 0.76,
    "inf2.8xlarge": 1.97,
    "inf2.24xlarge": 6.49,
    "inf2.48xlarge": 12.98,
}
PRICE_SOURCE: Final = "AWS EC2 On-Demand pricing, us-east-1, Linux (2024)"


def price(per_hour: float | None, instance: str | None) -> tuple[float, str] | None:
    """The hourly price and where it comes from: the given one wins over the instance's."""
    if per_hour is not None:
        return per_hour, "--neuron-price-per-hour"
    if instance is not None:
        return PRICES[instance], f"{instance}: {PRICE_SOURCE}"
    return None
