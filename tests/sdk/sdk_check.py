#!/usr/bin/env python3
"""The official Alibaba Cloud Python SDK (aliyun-python-sdk-core and
aliyun-python-sdk-ecs from PyPI), unchanged, against eniip-sim.

Usage: sdk_check.py ECS_URL REGION ACCESS_KEY_ID ACCESS_KEY_SECRET INSTANCE_ID POD_GROUPS
The only thing pointed anywhere is the endpoint (host:port, protocol http).
POD_GROUPS (`sg-a,sg-b`): two of the VPC's security groups beside the
instance's own; an ENI is created in both and moved to the instance's group
with ModifyNetworkInterfaceAttribute, read back each time.
Exits non-zero on any failure.
"""
import json
import sys
import time

from aliyunsdkcore.acs_exception.exceptions import ServerException
from aliyunsdkcore.client import AcsClient
from aliyunsdkecs.request.v20140526 import (
    AssignPrivateIpAddressesRequest,
    AttachNetworkInterfaceRequest,
    CreateNetworkInterfaceRequest,
    DescribeInstanceAttributeRequest,
    DescribeInstanceTypesRequest,
    DeleteNetworkInterfaceRequest,
    DescribeNetworkInterfacesRequest,
    ModifyNetworkInterfaceAttributeRequest,
)


def main():
    url, region, key_id, secret, instance, pod_groups = sys.argv[1:7]
    endpoint = url.split("://", 1)[1]
    client = AcsClient(key_id, secret, region)

    def call(req):
        req.set_endpoint(endpoint)
        req.set_protocol_type("http")
        return json.loads(client.do_action_with_exception(req))

    r = DescribeInstanceTypesRequest.DescribeInstanceTypesRequest()
    r.set_InstanceTypess(["ecs.g7.xlarge"])
    types = call(r)["InstanceTypes"]["InstanceType"]
    assert types[0]["EniQuantity"] == 4, types
    print("DescribeInstanceTypes ok:", types[0]["InstanceTypeId"])

    r = DescribeInstanceAttributeRequest.DescribeInstanceAttributeRequest()
    r.set_InstanceId(instance)
    attr = call(r)
    sg = attr["SecurityGroupIds"]["SecurityGroupId"][0]
    vsw = attr["VpcAttributes"]["VSwitchId"]

    r = CreateNetworkInterfaceRequest.CreateNetworkInterfaceRequest()
    r.set_VSwitchId(vsw)
    r.set_SecurityGroupIdss([sg])
    r.set_SecondaryPrivateIpAddressCount(2)
    r.set_Tags([{"Key": "creator", "Value": "sdk-check"}])
    created = call(r)
    eni = created["NetworkInterfaceId"]
    assert len(created["PrivateIpSets"]["PrivateIpSet"]) == 3, created
    print("CreateNetworkInterface ok:", eni)

    r = AttachNetworkInterfaceRequest.AttachNetworkInterfaceRequest()
    r.set_NetworkInterfaceId(eni)
    r.set_InstanceId(instance)
    call(r)
    print("AttachNetworkInterface ok")

    deadline = time.time() + 10
    status = None
    while time.time() < deadline:
        r = DescribeNetworkInterfacesRequest.DescribeNetworkInterfacesRequest()
        r.set_NetworkInterfaceIds([eni])
        sets = call(r)["NetworkInterfaceSets"]["NetworkInterfaceSet"]
        status = sets[0]["Status"]
        if status == "InUse":
            break
        time.sleep(0.1)
    assert status == "InUse", status
    print("DescribeNetworkInterfaces ok:", status)

    r = AssignPrivateIpAddressesRequest.AssignPrivateIpAddressesRequest()
    r.set_NetworkInterfaceId(eni)
    r.set_SecondaryPrivateIpAddressCount(3)
    ips = call(r)["AssignedPrivateIpAddressesSet"]["PrivateIpSet"]["PrivateIpAddress"]
    assert len(ips) == 3, ips
    print("AssignPrivateIpAddresses ok:", ips)

    r = DescribeNetworkInterfacesRequest.DescribeNetworkInterfacesRequest()
    r.set_InstanceId(instance)
    r.set_MaxResults(10)
    enis = call(r)["NetworkInterfaceSets"]["NetworkInterfaceSet"]
    assert any(e["NetworkInterfaceId"] == eni and len(e["PrivateIpSets"]["PrivateIpSet"]) == 6 for e in enis), enis

    groups = pod_groups.split(",")
    r = CreateNetworkInterfaceRequest.CreateNetworkInterfaceRequest()
    r.set_VSwitchId(vsw)
    r.set_SecurityGroupIdss(groups)
    in_groups = call(r)["NetworkInterfaceId"]

    def groups_of(eni):
        r = DescribeNetworkInterfacesRequest.DescribeNetworkInterfacesRequest()
        r.set_NetworkInterfaceIds([eni])
        got = call(r)["NetworkInterfaceSets"]["NetworkInterfaceSet"][0]
        return sorted(got["SecurityGroupIds"]["SecurityGroupId"])

    assert groups_of(in_groups) == sorted(groups), groups_of(in_groups)
    r = ModifyNetworkInterfaceAttributeRequest.ModifyNetworkInterfaceAttributeRequest()
    r.set_NetworkInterfaceId(in_groups)
    r.set_SecurityGroupIds([sg])
    call(r)
    assert groups_of(in_groups) == [sg], groups_of(in_groups)
    r = DeleteNetworkInterfaceRequest.DeleteNetworkInterfaceRequest()
    r.set_NetworkInterfaceId(in_groups)
    call(r)
    print("security groups ok:", groups, "->", [sg])

    bad = AcsClient(key_id, secret + "-wrong", region)
    r = DescribeInstanceTypesRequest.DescribeInstanceTypesRequest()
    r.set_endpoint(endpoint)
    r.set_protocol_type("http")
    try:
        bad.do_action_with_exception(r)
    except ServerException as e:
        # The emulator answers 400 SignatureDoesNotMatch with "server string
        # to sign is:<StringToSign>". aliyunsdkcore (client.py) compares that
        # with its own string to sign and, when they are equal, reports
        # InvalidAccessKeySecret instead. So this code proves both the
        # refusal and that our canonicalization matches the SDK's exactly;
        # SignatureDoesNotMatch here would mean they differ.
        assert e.get_http_status() == 400, e
        assert e.get_error_code() == "InvalidAccessKeySecret", e
        print("wrong secret ok: SignatureDoesNotMatch, same string to sign ->", e.get_error_code())
    else:
        raise AssertionError("a wrong secret was accepted")
    print("SDK CHECK PASSED")


if __name__ == "__main__":
    main()
