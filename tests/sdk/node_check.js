#!/usr/bin/env node
/*
 * The official Alibaba Cloud Node SDKs, unchanged, against eniip-sim:
 * the legacy RPC client (@alicloud/pop-core) and today's generated client
 * (@alicloud/ecs20140526 with @alicloud/openapi-client's Config), pinned in
 * tests/sdk/node/package.json and installed by .ci/run into
 * target/node-sdk (NODE_PATH=target/node-sdk/node_modules).
 *
 * Usage: node_check.js ECS_URL REGION ACCESS_KEY_ID ACCESS_KEY_SECRET INSTANCE_ID POD_GROUPS
 * The instance's vswitch must be dual stack (an IPv6 block), as
 * tests/it/sim_node_sdk.rs starts the emulator. Each SDK runs with its
 * defaults (pop-core: GET, signature 1.0 HMAC-SHA1; ecs20140526: signature
 * V3, ACS3-HMAC-SHA256); the only things set are what any user sets for a
 * custom endpoint: pop-core's `endpoint` is a URL, so `http://host:port`;
 * ecs20140526's `endpoint` is a host (`host:port`) and its `protocol`
 * defaults to https, so `protocol: 'http'`. With each SDK:
 * DescribeInstanceAttribute, CreateNetworkInterface with Ipv6PrefixCount=1
 * whose /80 DescribeNetworkInterfaces reads back
 * (Ipv6PrefixSets.Ipv6PrefixSet[].Ipv6Prefix), AssignPrivateIpAddresses,
 * DeleteNetworkInterface, then a delete of an unknown ENI that must surface
 * the emulator's InvalidEniId.NotFound; and an ENI created in POD_GROUPS
 * (`sg-a,sg-b`: two of the VPC's security groups beside the instance's),
 * read back (SecurityGroupIds.SecurityGroupId[]), moved to the instance's
 * group with ModifyNetworkInterfaceAttribute (SecurityGroupId.N) and read
 * back again. Prints `passed` at the end; exits
 * non-zero on any failure (or after 120 s). The secret is never printed.
 */
'use strict';

const assert = require('node:assert/strict');
const RPCClient = require('@alicloud/pop-core');
const Ecs = require('@alicloud/ecs20140526');
const OpenApi = require('@alicloud/openapi-client');

const UNKNOWN_ENI = 'eni-bp1nosuchthing00000';

/** The /80s of one ENI (a NetworkInterfaceSet, or a create answer). */
function prefixesOf(set) {
  return ((set.Ipv6PrefixSets || {}).Ipv6PrefixSet || []).map((p) => p.Ipv6Prefix);
}

/**
 * Polls `describe()` (the ENI's DescribeNetworkInterfaces sets) until the
 * deleted ENI is gone: the service deletes asynchronously (the ENI reads
 * `Deleting` for a while), so a deadline bounds the wait.
 */
async function waitGone(eni, describe, deadlineMs = 15000) {
  const deadline = Date.now() + deadlineMs;
  let sets;
  while (Date.now() < deadline) {
    sets = await describe();
    if (sets.length === 0) return;
    assert.equal(sets.length, 1, JSON.stringify(sets));
    const status = sets[0].Status || sets[0].status;
    assert.equal(status, 'Deleting', `${eni} after its delete`);
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new assert.AssertionError({ message: `${eni} still described ${deadlineMs} ms after its delete` });
}

/** The error `call()` rejects with; fails saying `accepted` if none. */
async function refused(call, accepted) {
  try {
    await call();
  } catch (e) {
    return e;
  }
  throw new assert.AssertionError({ message: accepted });
}

async function popCore(url, region, keyId, secret, instance, podGroups) {
  const client = new RPCClient({
    accessKeyId: keyId,
    accessKeySecret: secret,
    endpoint: url,
    apiVersion: '2014-05-26',
  });
  const call = (action, params) => client.request(action, { RegionId: region, ...params });

  const attr = await call('DescribeInstanceAttribute', { InstanceId: instance });
  assert.equal(attr.InstanceId, instance);
  const sg = attr.SecurityGroupIds.SecurityGroupId[0];
  const vsw = attr.VpcAttributes.VSwitchId;
  assert.ok(sg && vsw, JSON.stringify(attr));

  const created = await call('CreateNetworkInterface', {
    VSwitchId: vsw,
    SecurityGroupIds: [sg],
    Ipv6PrefixCount: 1,
    Tag: [{ Key: 'creator', Value: 'node-pop-core' }],
  });
  const eni = created.NetworkInterfaceId;
  assert.match(eni, /^eni-/, JSON.stringify(created));
  const described = await call('DescribeNetworkInterfaces', { NetworkInterfaceId: [eni] });
  const sets = described.NetworkInterfaceSets.NetworkInterfaceSet;
  assert.equal(sets.length, 1, JSON.stringify(described));
  const p80 = prefixesOf(sets[0]);
  assert.equal(p80.length, 1, JSON.stringify(sets[0]));
  assert.match(p80[0], /::\/80$/);
  assert.deepEqual(prefixesOf(created), p80, 'the create and the describe disagree on the /80');

  const assigned = await call('AssignPrivateIpAddresses', {
    NetworkInterfaceId: eni,
    SecondaryPrivateIpAddressCount: 2,
  });
  const ips = assigned.AssignedPrivateIpAddressesSet.PrivateIpSet.PrivateIpAddress;
  assert.equal(ips.length, 2, JSON.stringify(assigned));

  await call('DeleteNetworkInterface', { NetworkInterfaceId: eni });
  await waitGone(eni, async () =>
    (await call('DescribeNetworkInterfaces', { NetworkInterfaceId: [eni] })).NetworkInterfaceSets
      .NetworkInterfaceSet);

  const e = await refused(
    () => call('DeleteNetworkInterface', { NetworkInterfaceId: UNKNOWN_ENI }),
    'pop-core: deleting an unknown ENI was accepted',
  );
  assert.equal(e.code, 'InvalidEniId.NotFound', `${e.name}: ${e.code}`);

  const groups = podGroups.split(',');
  const inGroups = (await call('CreateNetworkInterface', { VSwitchId: vsw, SecurityGroupIds: groups }))
    .NetworkInterfaceId;
  const groupsOf = async () =>
    (await call('DescribeNetworkInterfaces', { NetworkInterfaceId: [inGroups] })).NetworkInterfaceSets
      .NetworkInterfaceSet[0].SecurityGroupIds.SecurityGroupId.slice()
      .sort();
  assert.deepEqual(await groupsOf(), groups.slice().sort());
  await call('ModifyNetworkInterfaceAttribute', { NetworkInterfaceId: inGroups, SecurityGroupId: [sg] });
  assert.deepEqual(await groupsOf(), [sg]);
  await call('DeleteNetworkInterface', { NetworkInterfaceId: inGroups });
  console.log(`pop-core ok: ${eni} /80 ${p80[0]}, ${ips.length} IPs, unknown ENI -> ${e.code}, groups ${groups} -> ${sg}`);
}

async function ecs20140526(url, region, keyId, secret, instance, podGroups) {
  const client = new Ecs.default(
    new OpenApi.Config({
      accessKeyId: keyId,
      accessKeySecret: secret,
      regionId: region,
      endpoint: url.split('://', 2)[1],
      protocol: 'http',
    }),
  );

  const attr = (
    await client.describeInstanceAttribute(
      new Ecs.DescribeInstanceAttributeRequest({ instanceId: instance }),
    )
  ).body;
  assert.equal(attr.instanceId, instance);
  const sg = attr.securityGroupIds.securityGroupId[0];
  const vsw = attr.vpcAttributes.vSwitchId;
  assert.ok(sg && vsw, JSON.stringify(attr));

  const created = (
    await client.createNetworkInterface(
      new Ecs.CreateNetworkInterfaceRequest({
        regionId: region,
        vSwitchId: vsw,
        securityGroupIds: [sg],
        ipv6PrefixCount: 1,
        tag: [new Ecs.CreateNetworkInterfaceRequestTag({ key: 'creator', value: 'node-ecs20140526' })],
      }),
    )
  ).body;
  const eni = created.networkInterfaceId;
  assert.match(eni, /^eni-/, JSON.stringify(created));
  const describe = async () =>
    (
      await client.describeNetworkInterfaces(
        new Ecs.DescribeNetworkInterfacesRequest({ regionId: region, networkInterfaceId: [eni] }),
      )
    ).body.networkInterfaceSets.networkInterfaceSet;
  const sets = await describe();
  assert.equal(sets.length, 1, JSON.stringify(sets));
  const p80 = sets[0].ipv6PrefixSets.ipv6PrefixSet.map((p) => p.ipv6Prefix);
  assert.equal(p80.length, 1, JSON.stringify(sets[0]));
  assert.match(p80[0], /::\/80$/);
  const createdP80 = created.ipv6PrefixSets.ipv6PrefixSet.map((p) => p.ipv6Prefix);
  assert.deepEqual(createdP80, p80, 'the create and the describe disagree on the /80');

  const assigned = (
    await client.assignPrivateIpAddresses(
      new Ecs.AssignPrivateIpAddressesRequest({
        regionId: region,
        networkInterfaceId: eni,
        secondaryPrivateIpAddressCount: 2,
      }),
    )
  ).body;
  const ips = assigned.assignedPrivateIpAddressesSet.privateIpSet.privateIpAddress;
  assert.equal(ips.length, 2, JSON.stringify(assigned));

  await client.deleteNetworkInterface(
    new Ecs.DeleteNetworkInterfaceRequest({ regionId: region, networkInterfaceId: eni }),
  );
  await waitGone(eni, describe);

  const e = await refused(
    () =>
      client.deleteNetworkInterface(
        new Ecs.DeleteNetworkInterfaceRequest({ regionId: region, networkInterfaceId: UNKNOWN_ENI }),
      ),
    'ecs20140526: deleting an unknown ENI was accepted',
  );
  assert.equal(e.code, 'InvalidEniId.NotFound', `${e.name}: ${e.code}`);
  assert.equal(e.statusCode, 404, `${e.name}: ${e.code} ${e.statusCode}`);

  const groups = podGroups.split(',');
  const inGroups = (
    await client.createNetworkInterface(
      new Ecs.CreateNetworkInterfaceRequest({ regionId: region, vSwitchId: vsw, securityGroupIds: groups }),
    )
  ).body.networkInterfaceId;
  const groupsOf = async () =>
    (
      await client.describeNetworkInterfaces(
        new Ecs.DescribeNetworkInterfacesRequest({ regionId: region, networkInterfaceId: [inGroups] }),
      )
    ).body.networkInterfaceSets.networkInterfaceSet[0].securityGroupIds.securityGroupId
      .slice()
      .sort();
  assert.deepEqual(await groupsOf(), groups.slice().sort());
  await client.modifyNetworkInterfaceAttribute(
    new Ecs.ModifyNetworkInterfaceAttributeRequest({
      regionId: region,
      networkInterfaceId: inGroups,
      securityGroupId: [sg],
    }),
  );
  assert.deepEqual(await groupsOf(), [sg]);
  const unknown = await refused(
    () =>
      client.modifyNetworkInterfaceAttribute(
        new Ecs.ModifyNetworkInterfaceAttributeRequest({
          regionId: region,
          networkInterfaceId: inGroups,
          securityGroupId: ['sg-bp1nosuchgroup0000000'],
        }),
      ),
    'ecs20140526: a group the VPC does not have was accepted',
  );
  assert.equal(unknown.code, 'InvalidSecurityGroupId.NotFound', `${unknown.name}: ${unknown.code}`);
  await client.deleteNetworkInterface(
    new Ecs.DeleteNetworkInterfaceRequest({ regionId: region, networkInterfaceId: inGroups }),
  );
  console.log(
    `ecs20140526 ok: ${eni} /80 ${p80[0]}, ${ips.length} IPs, unknown ENI -> ${e.name} ${e.code} ${e.statusCode}, groups ${groups} -> ${sg}`,
  );
}

async function main() {
  const args = process.argv.slice(2);
  if (args.length !== 6) {
    console.error('usage: node_check.js ECS_URL REGION ACCESS_KEY_ID ACCESS_KEY_SECRET INSTANCE_ID POD_GROUPS');
    process.exit(2);
  }
  // Every wait here has a deadline (the SDKs' own request timeouts, the
  // delete polls'); this one bounds the whole run whatever hangs.
  setTimeout(() => {
    console.error('FAILED: no verdict within 120 s');
    process.exit(1);
  }, 120000).unref();
  await popCore(...args);
  await ecs20140526(...args);
  console.log('passed');
}

main().catch((e) => {
  // The name and message only: an SDK's error object carries the request
  // it sent (pop-core's signed URL, in its message too), not for a log.
  console.error(`FAILED: ${e.name}: ${String(e.message).replace(/, URL: .*/s, '')}`);
  process.exit(1);
});
