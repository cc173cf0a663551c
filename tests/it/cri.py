"""A kubelet's pod-sandbox calls over containerd's CRI socket (CRI v1),
for tests/it/cni_containerd.rs and the containerd benchmark. One call per
run; prints one JSON line; on an RPC error prints {"error": ...} and exits 1.

    cri.py SOCKET run NAME NAMESPACE UID [ANNOTATIONS_JSON]
    cri.py SOCKET status ID
    cri.py SOCKET stop ID
    cri.py SOCKET remove ID
    cri.py SOCKET list
    cri.py SOCKET storm PREFIX NAMESPACE N
    cri.py SOCKET clean

storm: N RunPodSandbox at once (one thread each, released together, on
one channel as a kubelet's), pods PREFIX0..PREFIXN-1; prints one entry per
pod, {"name", "id", "seconds"} or {"name", "error"}. clean: stops and
removes every sandbox listed (a few at a time); prints how many and the
errors.
"""

import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
from cri_api.v1 import api_pb2, api_pb2_grpc

# Every call has a deadline: a test never waits forever on containerd.
DEADLINE_S = 60
# A storm's calls wait for each other: each may take longer.
STORM_DEADLINE_S = 300


def main():
    sock, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    channel = grpc.insecure_channel("unix://" + sock)
    rt = api_pb2_grpc.RuntimeServiceStub(channel)
    try:
        out = call(rt, cmd, args)
    except grpc.RpcError as e:
        print(json.dumps({"error": e.details(), "code": str(e.code())}))
        sys.exit(1)
    print(json.dumps(out))


def sandbox_config(name, namespace, uid, annotations):
    meta = api_pb2.PodSandboxMetadata(name=name, namespace=namespace, uid=uid, attempt=0)
    return api_pb2.PodSandboxConfig(
        metadata=meta,
        hostname=name,
        log_directory="",
        linux=api_pb2.LinuxPodSandboxConfig(),
        annotations=annotations,
    )


def storm(rt, prefix, namespace, n):
    gate = threading.Barrier(n)

    def one(i):
        name = prefix + str(i)
        config = sandbox_config(name, namespace, "uid-" + name, {})
        gate.wait(timeout=DEADLINE_S)
        start = time.monotonic()
        try:
            r = rt.RunPodSandbox(
                api_pb2.RunPodSandboxRequest(config=config), timeout=STORM_DEADLINE_S
            )
        except grpc.RpcError as e:
            return {"name": name, "error": e.details()}
        return {"name": name, "id": r.pod_sandbox_id, "seconds": time.monotonic() - start}

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(one, range(n)))


def clean(rt):
    pods = rt.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=DEADLINE_S).items

    def one(s):
        try:
            rt.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=s.id), timeout=DEADLINE_S)
            rt.RemovePodSandbox(
                api_pb2.RemovePodSandboxRequest(pod_sandbox_id=s.id), timeout=DEADLINE_S
            )
            return None
        except grpc.RpcError as e:
            return s.id + ": " + str(e.details())

    with ThreadPoolExecutor(max_workers=8) as pool:
        errors = [e for e in pool.map(one, pods) if e]
    return {"removed": len(pods) - len(errors), "errors": errors}


def call(rt, cmd, args):
    if cmd == "storm":
        return storm(rt, args[0], args[1], int(args[2]))
    if cmd == "clean":
        return clean(rt)
    if cmd == "run":
        name, namespace, uid = args[:3]
        annotations = json.loads(args[3]) if len(args) > 3 else {}
        config = sandbox_config(name, namespace, uid, annotations)
        start = time.monotonic()
        r = rt.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=config), timeout=DEADLINE_S)
        return {"id": r.pod_sandbox_id, "seconds": time.monotonic() - start}
    if cmd == "status":
        r = rt.PodSandboxStatus(
            api_pb2.PodSandboxStatusRequest(pod_sandbox_id=args[0], verbose=True),
            timeout=DEADLINE_S,
        )
        info = json.loads(r.info.get("info", "{}"))
        netns = ""
        spec = info.get("runtimeSpec", {})
        for ns in spec.get("linux", {}).get("namespaces", []):
            if ns.get("type") == "network":
                netns = ns.get("path", "")
        return {
            "state": api_pb2.PodSandboxState.Name(r.status.state),
            "ip": r.status.network.ip,
            "ips": [i.ip for i in r.status.network.additional_ips],
            "pid": info.get("pid", 0),
            "netns": netns,
        }
    if cmd == "stop":
        rt.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=args[0]), timeout=DEADLINE_S)
        return {"ok": True}
    if cmd == "remove":
        rt.RemovePodSandbox(
            api_pb2.RemovePodSandboxRequest(pod_sandbox_id=args[0]), timeout=DEADLINE_S
        )
        return {"ok": True}
    if cmd == "list":
        r = rt.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=DEADLINE_S)
        return [
            {"id": s.id, "name": s.metadata.name, "state": api_pb2.PodSandboxState.Name(s.state)}
            for s in r.items
        ]
    raise SystemExit("unknown command " + cmd)


if __name__ == "__main__":
    main()
