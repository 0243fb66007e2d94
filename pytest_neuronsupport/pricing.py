"""The instance types ``--neuron-instance`` names: their chips, and an on-demand hourly price
only where one can be sourced.

Prices, from the AWS Neuron documentation, "Trn1/Trn1n Inference Performance" (last update
April 30th, 2024): its decoder tables list trn1.32xlarge's "On-Demand hourly rate" as $21.50;
its encoder tables' costs imply $1.34 an hour for trn1.2xlarge (3098.91 inferences/s at $0.120
per 1M inferences, $1.34 / 3600 / 3098.91 * 1e6 = $0.120). No on-demand price of a Trn2 or Trn3
instance was found in AWS's documentation: none is made up; ``--neuron-price-per-hour`` gives
any price (and overrides the table).

Chips: "Amazon EC2 Trn2 Architecture" (trn2.48xlarge and trn2u.48xlarge: 16 Trainium2 chips;
four trn2u.48xlarge make a Trn2 UltraServer), and trn2.3xlarge, one Trainium2 chip (the Neuron
docs name it as an instance type; its chip count is not on the pages read). AWS documents Trn3
as UltraServers of 16-chip (Gen1) or 4-chip (Gen2) servers, without instance type names: any
``trn3.<size>`` is accepted, with its documented per-core peaks (:mod:`.peaks`) and no price.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from pytest_neuronsupport.peaks import FAMILIES


@dataclass(frozen=True)
class Instance:
    """An instance type: its chips, and its on-demand price where sourced (None: not)."""

    chips: int
    price: float | None = None


PRICE_SOURCE: Final = "AWS Neuron docs, Trn1/Trn1n Inference Performance (April 2024)"
INSTANCES: Final[dict[str, Instance]] = {
    "trn1.2xlarge": Instance(1, 1.34),
    "trn1.32xlarge": Instance(16, 21.50),
    "trn2.3xlarge": Instance(1),
    "trn2.48xlarge": Instance(16),
    "trn2u.48xlarge": Instance(16),
}
#: Dollars per hour, on demand: only the sourced ones.
PRICES: Final[dict[str, float]] = {
    name: instance.price for name, instance in INSTANCES.items() if instance.price is not None
}


def parse_instance(text: str) -> str:
    """An instance type of the table, or of a family whose chip the peaks table knows
    (``trn3.<size>``); a ValueError naming the known ones otherwise."""
    if text in INSTANCES or (text.split(".")[0] in FAMILIES and "." in text):
        return text
    raise ValueError(
        f"--neuron-instance {text!r}: not an instance type known here (one of "
        f"{', '.join(INSTANCES)}, or any {', '.join(f'{f}.<size>' for f in FAMILIES)})"
    )


def price(per_hour: float | None, instance: str | None) -> tuple[float, str] | None:
    """The hourly price and where it comes from: the given one wins over the instance's; None
    where neither is known (a Trn2 or Trn3 instance without ``--neuron-price-per-hour``)."""
    if per_hour is not None:
        return per_hour, "--neuron-price-per-hour"
    if instance is not None and instance in PRICES:
        return PRICES[instance], f"{instance}: {PRICE_SOURCE}"
    return None
