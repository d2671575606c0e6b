"""Azure public-cloud region names, as `az account list-locations --query "[].name"` prints them (2026).

A stack's `location` must be one of these: a typo would otherwise reach Azure only at `pulumi up`. A region
that opened after this list was written can be added here in one line.
"""
from __future__ import annotations

REGIONS = frozenset("""
australiacentral australiacentral2 australiaeast australiasoutheast austriaeast belgiumcentral brazilsouth
brazilsoutheast canadacentral canadaeast centralindia centralus chilecentral denmarkeast eastasia eastus eastus2
francecentral francesouth germanynorth germanywestcentral indonesiacentral israelcentral italynorth japaneast
japanwest koreacentral koreasouth malaysiawest mexicocentral newzealandnorth northcentralus northeurope norwayeast
norwaywest polandcentral qatarcentral southafricanorth southafricawest southcentralus southeastasia southindia
spaincentral swedencentral swedensouth switzerlandnorth switzerlandwest uaecentral uaenorth uksouth ukwest
westcentralus westeurope westindia westus westus2 westus3
""".split())
