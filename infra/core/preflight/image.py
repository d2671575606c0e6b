"""preflight's check of the Batch pool's Marketplace image (pure; the calls are in infra/backends/preflight.py):
is the pinned version still offered in the region, is it scheduled for deprecation, and, in user-subscription
mode, are its Marketplace terms accepted in the subscription?

- The pool pins an exact version (infra/backends/batch/cluster.py HPC_IMAGE_VERSION); "an old version can leave the
  marketplace, and then creating a pool of it fails". Virtual Machine Images - Get (compute 2024-07-01,
  VirtualMachineImage_Get_MaximumSet_Gen.json: properties{plan{publisher, name, product}, imageDeprecationStatus
  {imageState, scheduledDeprecationTime, alternativeOption}}) answers 404 for a version the region does not offer.
- User-subscription mode: "You must accept the legal terms for the image before you use a subscription with a Batch
  account in user subscription mode. If you haven't done this action, you might get the error Allocation failed due
  to marketplace purchase eligibility when you try to allocate Batch nodes" (batch-account-create-portal, "Accept
  legal terms": https://learn.microsoft.com/azure/batch/batch-account-create-portal). The terms belong to the
  image's purchase plan: an image without `plan` has none to accept. Marketplace Agreements - Get
  (marketplaceordering 2021-01-01, GetMarketplaceTerms.json: properties.accepted, "If any version of the terms have
  been accepted") says whether the subscription accepted them; `az vm image terms accept` accepts them. In
  batch-service mode the VMs are in Batch's own subscriptions, and the docs ask nothing of the user's.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from infra.core.preflight.check import FAIL, OK, WARN, Check

NAME = "pool image"
IMAGE_DOC = "https://learn.microsoft.com/azure/batch/batch-account-create-portal"


def image_urn(image: Mapping[str, str]) -> str:
    return ":".join(image.get(k, "") for k in ("publisher", "offer", "sku", "version"))


def plan_of(answer: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    """The image's purchase plan (Virtual Machine Images - Get's properties.plan), or None."""
    plan = ((answer or {}).get("properties") or {}).get("plan")
    return plan if isinstance(plan, Mapping) and plan.get("name") else None


def pool_image_verdict(image: Mapping[str, str], location: str, answer: Mapping[str, Any] | None,
                       user_subscription: bool, agreement: Mapping[str, Any] | None = None) -> Check:
    """`answer`: Virtual Machine Images - Get's body, None for a 404; `agreement`: Marketplace Agreements - Get's
    body for the image's plan (asked only in user-subscription mode for an image with a plan)."""
    urn = image_urn(image)
    if answer is None:
        return Check(NAME, FAIL, f"{urn} is not offered in {location}, so `up` cannot create the pool: move "
                                 "HPC_IMAGE_VERSION (infra/backends/batch/cluster.py) to a version `az vm image list "
                                 f"--location {location} --publisher {image.get('publisher')} --offer "
                                 f"{image.get('offer')} --sku {image.get('sku')} --all` lists")
    plan = plan_of(answer)
    notes = []
    status = (answer.get("properties") or {}).get("imageDeprecationStatus") or {}
    state = str(status.get("imageState", ""))
    if state and state.lower() != "active":
        notes.append(f"the image is {state}" + (f" from {status['scheduledDeprecationTime']}"
                                                 if status.get("scheduledDeprecationTime") else "") +
                     ": move HPC_IMAGE_VERSION forward before it goes")
    if plan is not None and user_subscription:
        terms = f"{plan.get('publisher')}:{plan.get('product')}:{plan.get('name')}"
        if not ((agreement or {}).get("properties") or {}).get("accepted"):
            return Check(NAME, FAIL, f"{urn} has Marketplace plan {terms}, whose terms this subscription has not "
                                     "accepted: a user-subscription pool's nodes then fail to allocate (\"marketplace "
                                     f"purchase eligibility\", {IMAGE_DOC}); accept them once: `az vm image terms "
                                     f"accept --publisher {plan.get('publisher')} --offer {plan.get('product')} "
                                     f"--plan {plan.get('name')}`")
        notes.insert(0, f"its Marketplace plan {terms}'s terms are accepted")
    elif plan is None and user_subscription:
        notes.insert(0, "it has no Marketplace plan, so no terms to accept")
    text = f"{urn} is offered in {location}" + ("; " + "; ".join(notes) if notes else "")
    return Check(NAME, WARN if state and state.lower() != "active" else OK, text)
