#!/usr/bin/env python3
"""Today's official Alibaba Cloud Python SDK (alibabacloud_ecs20140526,
alibabacloud_vpc20160428 on alibabacloud_tea_openapi, from PyPI),
unchanged, against eniip-sim.

Usage: tea_check.py MODE ECS_URL REGION ACCESS_KEY_ID ACCESS_KEY_SECRET INSTANCE_ID POD_GROUPS
MODE "default" leaves the SDK's Config at its defaults (signature V3,
ACS3-HMAC-SHA256); "v2" sets signature_algorithm='v2' (the RPC signature
1.0, HMAC-SHA1). The only things pointed anywhere are the endpoint
(host:port) and protocol http. Every action eniipd uses runs with typed
requests and typed responses, then the three tag actions; a wrong secret
must come back as the SDK's signature error and an injected
Throttling.User as its throttling error. POD_GROUPS (`sg-a,sg-b`) are two
security groups of the emulated VPC beside the instance's own: an ENI is
created in both, read back, moved to the instance's group with
ModifyNetworkInterfaceAttribute and read back again, all through the
typed models (issue 39). Exits non-zero on any failure.
"""
import json
import sys
import time
import urllib.request

from alibabacloud_ecs20140526 import models as ecs_models
from alibabacloud_ecs20140526.client import Client as EcsClient
from alibabacloud_tea_openapi import models as open_api_models
from alibabacloud_vpc20160428 import models as vpc_models
from alibabacloud_vpc20160428.client import Client as VpcClient


def config(mode, endpoint, region, key_id, secret):
    c = open_api_models.Config(
        access_key_id=key_id,
        access_key_secret=secret,
        region_id=region,
        endpoint=endpoint,
        protocol="http",
    )
    if mode == "v2":
        c.signature_algorithm = "v2"
    return c


def filled(obj, *names):
    """Every named attribute of a typed model is set (not None)."""
    for n in names:
        v = getattr(obj, n)
        assert v is not None, f"{type(obj).__name__}.{n} is None"


def fault(url, rule):
    req = urllib.request.Request(
        url + "/__sim/faults",
        data=json.dumps(rule).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=10).read()


def describe_g7_xlarge(ecs):
    """DescribeInstanceTypes of ecs.g7.xlarge through the client `ecs`."""
    return ecs.describe_instance_types(
        ecs_models.DescribeInstanceTypesRequest(instance_types=["ecs.g7.xlarge"])
    )


def refused(call, accepted):
    """The exception `call()` raises (the SDK's class is what the caller
    checks); an AssertionError saying `accepted` if it raises none."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the SDK's class is what is checked
        return e
    raise AssertionError(accepted)


def wait_status(ecs, region, eni, want, deadline_s=15):
    deadline = time.time() + deadline_s
    status = None
    while time.time() < deadline:
        r = ecs.describe_network_interfaces(
            ecs_models.DescribeNetworkInterfacesRequest(
                region_id=region, network_interface_id=[eni]
            )
        )
        sets = r.body.network_interface_sets.network_interface_set
        status = sets[0].status if sets else None
        if status == want:
            return sets[0] if sets else None
        time.sleep(0.05)
    raise AssertionError(f"{eni}: {status}, wanted {want}")


def security_groups(ecs, region, vsw, sg, groups):
    """An ENI in `groups` (two of the VPC's groups beside the instance's
    `sg`), read back, moved to [sg] and read back: the typed models carry
    SecurityGroupIds.N, SecurityGroupId.N and SecurityGroupIds.SecurityGroupId[]."""
    r = ecs.describe_security_groups(
        ecs_models.DescribeSecurityGroupsRequest(region_id=region)
    )
    listed = {g.security_group_id for g in r.body.security_groups.security_group}
    assert set(groups) | {sg} <= listed, (sorted(listed), groups)

    r = ecs.create_network_interface(
        ecs_models.CreateNetworkInterfaceRequest(
            region_id=region, v_switch_id=vsw, security_group_ids=groups,
        )
    )
    eni = r.body.network_interface_id

    def described():
        r = ecs.describe_network_interfaces(
            ecs_models.DescribeNetworkInterfacesRequest(
                region_id=region, network_interface_id=[eni]
            )
        )
        got = r.body.network_interface_sets.network_interface_set[0]
        return sorted(got.security_group_ids.security_group_id)

    assert described() == sorted(groups), described()
    ecs.modify_network_interface_attribute(
        ecs_models.ModifyNetworkInterfaceAttributeRequest(
            region_id=region, network_interface_id=eni, security_group_id=[sg]
        )
    )
    assert described() == [sg], described()
    e = refused(
        lambda: ecs.modify_network_interface_attribute(
            ecs_models.ModifyNetworkInterfaceAttributeRequest(
                region_id=region, network_interface_id=eni,
                security_group_id=["sg-bp1nosuchgroup0000000"],
            )
        ),
        "a group the VPC does not have was accepted",
    )
    assert getattr(e, "code", None) == "InvalidSecurityGroupId.NotFound", repr(e)
    assert described() == [sg], "a refused change changed the set"
    ecs.delete_network_interface(
        ecs_models.DeleteNetworkInterfaceRequest(region_id=region, network_interface_id=eni)
    )


def main():
    mode, url, region, key_id, secret, instance, pod_groups = sys.argv[1:8]
    endpoint = url.split("://", 1)[1]
    cfg = config(mode, endpoint, region, key_id, secret)
    ecs = EcsClient(cfg)
    vpc = VpcClient(config(mode, endpoint, region, key_id, secret))
    done = []

    r = describe_g7_xlarge(ecs)
    t = r.body.instance_types.instance_type[0]
    assert t.eni_quantity == 4, t
    filled(t, "instance_type_id", "eni_private_ip_address_quantity",
           "eni_ipv_6address_quantity", "cpu_core_count", "memory_size",
           "instance_bandwidth_rx", "instance_pps_rx", "physical_processor_model",
           "maximum_queue_number_per_eni", "network_card_quantity")
    assert t.network_cards.network_card_info[0].network_card_index == 0
    assert t.cpu_options.threads_per_core == 2
    assert t.enhanced_network.rss_support is True
    # Fields the model knows that the real answer carries (burstable types
    # give them values, others 0).
    filled(t, "baseline_credit", "initial_credit")
    done.append("DescribeInstanceTypes")

    r = ecs.describe_instance_attribute(
        ecs_models.DescribeInstanceAttributeRequest(instance_id=instance)
    )
    a = r.body
    filled(a, "instance_id", "instance_type", "host_name", "image_id",
           "serial_number", "status", "zone_id", "creation_time",
           "instance_charge_type", "expired_time")
    sg = a.security_group_ids.security_group_id[0]
    vsw = a.vpc_attributes.v_switch_id
    assert a.vpc_attributes.private_ip_address.ip_address, a.vpc_attributes
    done.append("DescribeInstanceAttribute")

    r = ecs.describe_security_groups(
        ecs_models.DescribeSecurityGroupsRequest(
            region_id=region, security_group_ids=json.dumps([sg])
        )
    )
    g = r.body.security_groups.security_group[0]
    assert g.security_group_id == sg
    filled(g, "creation_time", "ecs_count", "rule_count", "resource_group_id",
           "service_id", "available_instance_amount", "group_to_group_rule_count")
    done.append("DescribeSecurityGroups")

    r = vpc.describe_vswitches(
        vpc_models.DescribeVSwitchesRequest(region_id=region, v_switch_id=vsw)
    )
    v = r.body.v_switches.v_switch[0]
    assert v.v_switch_id == vsw and v.available_ip_address_count > 0, v
    assert v.ipv_6cidr_block, v
    filled(v, "creation_time", "network_acl_id")
    done.append("DescribeVSwitches")

    r = ecs.create_network_interface(
        ecs_models.CreateNetworkInterfaceRequest(
            region_id=region,
            v_switch_id=vsw,
            security_group_ids=[sg],
            secondary_private_ip_address_count=2,
            ipv_6address_count=1,
            description="created by the tea sdk check",
            tag=[ecs_models.CreateNetworkInterfaceRequestTag(key="creator", value="tea-check")],
            client_token=f"tea-check-{mode}-{time.time()}",
        )
    )
    eni = r.body.network_interface_id
    assert eni.startswith("eni-"), r.body
    assert len(r.body.private_ip_sets.private_ip_set) == 3, r.body
    assert r.body.private_ip_sets.private_ip_set[0].primary is True
    assert len(r.body.ipv_6sets.ipv_6set) == 1
    done.append("CreateNetworkInterface")

    ecs.attach_network_interface(
        ecs_models.AttachNetworkInterfaceRequest(
            region_id=region, network_interface_id=eni, instance_id=instance
        )
    )
    done.append("AttachNetworkInterface")
    s = wait_status(ecs, region, eni, "InUse")
    assert s.attachment.instance_id == instance or s.instance_id == instance, s
    filled(s, "queue_pair_number")
    r = ecs.describe_network_interfaces(
        ecs_models.DescribeNetworkInterfacesRequest(
            region_id=region, network_interface_id=[eni]
        )
    )
    filled(r.body, "page_number", "page_size", "total_count")
    # A tag filter with a key and no value matches on the key alone.
    r = ecs.describe_network_interfaces(
        ecs_models.DescribeNetworkInterfacesRequest(
            region_id=region,
            tag=[ecs_models.DescribeNetworkInterfacesRequestTag(key="creator")],
        )
    )
    found = [e.network_interface_id for e in r.body.network_interface_sets.network_interface_set]
    assert eni in found, f"Tag.1.Key alone did not find {eni}: {found}"
    done.append("DescribeNetworkInterfaces")

    r = ecs.assign_private_ip_addresses(
        ecs_models.AssignPrivateIpAddressesRequest(
            region_id=region, network_interface_id=eni,
            secondary_private_ip_address_count=2,
        )
    )
    ips = r.body.assigned_private_ip_addresses_set.private_ip_set.private_ip_address
    assert len(ips) == 2, ips
    done.append("AssignPrivateIpAddresses")
    ecs.unassign_private_ip_addresses(
        ecs_models.UnassignPrivateIpAddressesRequest(
            region_id=region, network_interface_id=eni, private_ip_address=ips[:1]
        )
    )
    done.append("UnassignPrivateIpAddresses")

    r = ecs.assign_ipv_6addresses(
        ecs_models.AssignIpv6AddressesRequest(
            region_id=region, network_interface_id=eni, ipv_6address_count=1
        )
    )
    v6 = r.body.ipv_6sets.ipv_6address
    assert len(v6) == 1, v6
    # An explicit address, next to the one just given.
    explicit = v6[0].rsplit(":", 1)[0] + ":beef"
    r = ecs.assign_ipv_6addresses(
        ecs_models.AssignIpv6AddressesRequest(
            region_id=region, network_interface_id=eni, ipv_6address=[explicit]
        )
    )
    assert r.body.ipv_6sets.ipv_6address == [explicit], r.body
    done.append("AssignIpv6Addresses")
    ecs.unassign_ipv_6addresses(
        ecs_models.UnassignIpv6AddressesRequest(
            region_id=region, network_interface_id=eni, ipv_6address=[explicit]
        )
    )
    done.append("UnassignIpv6Addresses")

    # IPv6 /80 prefixes (issue 32): a create with Ipv6PrefixCount=1, the
    # /80 read back from DescribeNetworkInterfaces (a list of objects),
    # one more assigned (AssignIpv6Addresses answers a list of strings)
    # and unassigned.
    r = ecs.create_network_interface(
        ecs_models.CreateNetworkInterfaceRequest(
            region_id=region, v_switch_id=vsw, security_group_ids=[sg],
            ipv_6prefix_count=1,
            tag=[ecs_models.CreateNetworkInterfaceRequestTag(key="creator", value="tea-check")],
        )
    )
    eni80 = r.body.network_interface_id
    created80 = [p.ipv_6prefix for p in r.body.ipv_6prefix_sets.ipv_6prefix_set]
    assert len(created80) == 1 and created80[0].endswith("::/80"), r.body
    r = ecs.describe_network_interfaces(
        ecs_models.DescribeNetworkInterfacesRequest(
            region_id=region, network_interface_id=[eni80]
        )
    )
    got = r.body.network_interface_sets.network_interface_set[0]
    described = [p.ipv_6prefix for p in got.ipv_6prefix_sets.ipv_6prefix_set]
    assert described == created80, (described, created80)
    r = ecs.assign_ipv_6addresses(
        ecs_models.AssignIpv6AddressesRequest(
            region_id=region, network_interface_id=eni80, ipv_6prefix_count=1
        )
    )
    more = r.body.ipv_6prefix_sets.ipv_6prefix
    assert len(more) == 1 and more[0] not in created80, more
    ecs.unassign_ipv_6addresses(
        ecs_models.UnassignIpv6AddressesRequest(
            region_id=region, network_interface_id=eni80, ipv_6prefix=more
        )
    )
    r = ecs.describe_network_interfaces(
        ecs_models.DescribeNetworkInterfacesRequest(
            region_id=region, network_interface_id=[eni80]
        )
    )
    got = r.body.network_interface_sets.network_interface_set[0]
    assert [p.ipv_6prefix for p in got.ipv_6prefix_sets.ipv_6prefix_set] == created80
    ecs.delete_network_interface(
        ecs_models.DeleteNetworkInterfaceRequest(region_id=region, network_interface_id=eni80)
    )
    done.append("Ipv6Prefix")

    security_groups(ecs, region, vsw, sg, pod_groups.split(","))
    done.append("ModifyNetworkInterfaceAttribute")

    ecs.tag_resources(
        ecs_models.TagResourcesRequest(
            region_id=region, resource_type="eni", resource_id=[eni],
            tag=[ecs_models.TagResourcesRequestTag(key="team", value="net")],
        )
    )
    done.append("TagResources")
    r = ecs.list_tag_resources(
        ecs_models.ListTagResourcesRequest(
            region_id=region, resource_type="eni", resource_id=[eni]
        )
    )
    tags = {t.tag_key: t.tag_value for t in r.body.tag_resources.tag_resource}
    assert tags == {"creator": "tea-check", "team": "net"}, tags
    assert all(t.resource_id == eni for t in r.body.tag_resources.tag_resource)
    done.append("ListTagResources")
    ecs.untag_resources(
        ecs_models.UntagResourcesRequest(
            region_id=region, resource_type="eni", resource_id=[eni], tag_key=["team"]
        )
    )
    r = ecs.list_tag_resources(
        ecs_models.ListTagResourcesRequest(
            region_id=region, resource_type="eni", resource_id=[eni]
        )
    )
    assert [t.tag_key for t in r.body.tag_resources.tag_resource] == ["creator"]
    done.append("UntagResources")
    e = refused(
        lambda: ecs.tag_resources(
            ecs_models.TagResourcesRequest(
                region_id=region, resource_type="eni",
                resource_id=["eni-bp1nosuchthing00000"],
                tag=[ecs_models.TagResourcesRequestTag(key="k", value="v")],
            )
        ),
        "tagging an unknown ENI was accepted",
    )
    assert getattr(e, "code", None) == "InvalidResourceId.NotFound", repr(e)
    assert getattr(e, "status_code", None) == 404, repr(e)

    ecs.detach_network_interface(
        ecs_models.DetachNetworkInterfaceRequest(
            region_id=region, network_interface_id=eni, instance_id=instance
        )
    )
    done.append("DetachNetworkInterface")
    wait_status(ecs, region, eni, "Available")
    ecs.delete_network_interface(
        ecs_models.DeleteNetworkInterfaceRequest(region_id=region, network_interface_id=eni)
    )
    done.append("DeleteNetworkInterface")

    # A wrong secret: the SDK's client error with the signature code and
    # the server's string to sign in its message.
    bad = EcsClient(config(mode, endpoint, region, key_id, secret + "-wrong"))
    e = refused(
        lambda: describe_g7_xlarge(bad),
        "a wrong secret was accepted",
    )
    assert type(e).__name__ == "ClientException", repr(e)
    assert e.code == "SignatureDoesNotMatch", repr(e)
    assert e.status_code == 400, repr(e)
    assert "server string to sign is:" in e.message, e.message
    want = "ACS3-HMAC-SHA256\n" if mode == "default" else "POST&%2F&"
    assert want in e.message, e.message
    print("wrong secret ok:", type(e).__name__, e.code)

    # Throttling.User, injected once: the SDK's throttling error, with the
    # wait the server asked for.
    fault(url, {"action": "DescribeInstanceTypes", "code": "Throttling.User", "count": 1})
    e = refused(
        lambda: describe_g7_xlarge(ecs),
        "the Throttling.User fault did not reach the SDK",
    )
    assert type(e).__name__ == "ThrottlingException", repr(e)
    assert e.code == "Throttling.User", repr(e)
    assert e.retry_after and e.retry_after > 0, repr(e)
    assert "Request was denied due to user flow control." in e.message, e.message
    print("throttling ok:", type(e).__name__, e.code, "retry_after", e.retry_after)

    print("actions:", " ".join(done))
    print("TEA SDK CHECK PASSED", mode)


if __name__ == "__main__":
    main()
