"""A kubelet's part for one DaemonSet pod, over containerd's CRI socket (CRI
v1), for tests/it/k8s_daemonset.rs: the pod template of
deploy/kubernetes/eniipd.yaml turned into CRI calls the way kubelet turns
it (host namespaces, init containers run to completion in order, then the
containers; security contexts, env with optional Secret references,
hostPath and ConfigMap volumes with their propagation, probes run with
ExecSync). One command per run; prints one JSON line; on an RPC error
prints {"error": ...} and exits 1.

    kubelet.py SOCKET up MANIFEST ROOT SETUP_JSON
        runs the pod; SETUP_JSON: {"name": pod name, "configmaps": {name:
        {key: text}}, "secrets": {name: {key: text}}, "hostpaths": {path:
        where the test keeps it}}; ROOT holds what kubelet keeps on the
        node (the ConfigMap volumes, logs)
    kubelet.py SOCKET probe MANIFEST CONTAINER_ID CONTAINER KIND
        one run of the container's KIND probe (startup, liveness,
        readiness)
    kubelet.py SOCKET until-probe MANIFEST CONTAINER_ID CONTAINER KIND
        the probe every periodSeconds until it succeeds, at most
        failureThreshold times (kubelet's startup probe)
    kubelet.py SOCKET down POD_ID GRACE_SECONDS
        StopContainer (SIGTERM, SIGKILL after the grace) for each container,
        then StopPodSandbox and RemovePodSandbox
    kubelet.py SOCKET pid CONTAINER_ID
        the container's process on the node
    kubelet.py SOCKET yaml2json MANIFEST
        the manifest's documents as a JSON list
"""

import json
import os
import sys
import time

import grpc
import yaml
from cri_api.v1 import api_pb2, api_pb2_grpc

# Every call has a deadline: a test never waits forever on containerd.
DEADLINE_S = 120
PROPAGATION = {
    None: api_pb2.PROPAGATION_PRIVATE,
    "None": api_pb2.PROPAGATION_PRIVATE,
    "HostToContainer": api_pb2.PROPAGATION_HOST_TO_CONTAINER,
    "Bidirectional": api_pb2.PROPAGATION_BIDIRECTIONAL,
}


def docs(manifest):
    with open(manifest) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def daemonset(manifest):
    return next(d for d in docs(manifest) if d["kind"] == "DaemonSet")


def container_spec(manifest, name):
    pod = daemonset(manifest)["spec"]["template"]["spec"]
    return next(c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == name)


def namespaces(pod):
    node, inpod = api_pb2.NODE, api_pb2.POD
    return api_pb2.NamespaceOption(
        network=node if pod.get("hostNetwork") else inpod,
        pid=node if pod.get("hostPID") else api_pb2.CONTAINER,
        ipc=node if pod.get("hostIPC") else inpod,
    )


def env_of(c, secrets):
    out = []
    for e in c.get("env", []):
        if "value" in e:
            out.append(api_pb2.KeyValue(key=e["name"], value=str(e["value"])))
            continue
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref is None:
            raise SystemExit(f"env {e['name']}: only value and secretKeyRef are played here")
        value = secrets.get(ref["name"], {}).get(ref["key"])
        if value is None:
            if ref.get("optional"):
                continue  # kubelet: an optional reference to nothing sets nothing
            raise SystemExit(f"env {e['name']}: secret {ref['name']} key {ref['key']} missing")
        out.append(api_pb2.KeyValue(key=e["name"], value=value))
    return out


def volume_paths(pod, root, configmaps, moved):
    """Volume name -> (host path, always read-only); `moved` maps a
    hostPath to where the test keeps it."""
    paths = {}
    for v in pod.get("volumes", []):
        if "hostPath" in v:
            path = moved.get(v["hostPath"]["path"], v["hostPath"]["path"])
            if v["hostPath"].get("type") == "DirectoryOrCreate":
                os.makedirs(path, mode=0o755, exist_ok=True)
            paths[v["name"]] = (path, False)
        elif "configMap" in v:
            d = os.path.join(root, "volumes", v["name"])
            os.makedirs(d, exist_ok=True)
            for key, text in configmaps[v["configMap"]["name"]].items():
                with open(os.path.join(d, key), "w") as f:
                    f.write(text)
            paths[v["name"]] = (d, True)
        else:
            raise SystemExit(f"volume {v['name']}: only hostPath and configMap are played here")
    return paths


def container_config(c, pod, paths, secrets, root, attempt=0):
    sc = c.get("securityContext", {})
    caps = sc.get("capabilities", {})
    mounts = []
    for m in c.get("volumeMounts", []):
        host, ro = paths[m["name"]]
        mounts.append(api_pb2.Mount(
            container_path=m["mountPath"],
            host_path=host,
            readonly=ro or bool(m.get("readOnly")),
            propagation=PROPAGATION[m.get("mountPropagation")],
        ))
    # kubelet's own: the termination message file.
    term = os.path.join(root, "termination", c["name"])
    os.makedirs(os.path.dirname(term), exist_ok=True)
    open(term, "a").close()
    mounts.append(api_pb2.Mount(container_path="/dev/termination-log", host_path=term))
    linux_sc = api_pb2.LinuxContainerSecurityContext(
        capabilities=api_pb2.Capability(
            add_capabilities=caps.get("add", []), drop_capabilities=caps.get("drop", [])
        ),
        privileged=bool(sc.get("privileged")),
        namespace_options=namespaces(pod),
        readonly_rootfs=bool(sc.get("readOnlyRootFilesystem")),
        no_new_privs=sc.get("allowPrivilegeEscalation") is False,
    )
    if "runAsUser" in sc:
        linux_sc.run_as_user.value = sc["runAsUser"]
    # kubelet passes the profile both ways: the field and the legacy string.
    apparmor = sc.get("appArmorProfile")
    if apparmor:
        kind = apparmor["type"]
        if kind == "Unconfined":
            linux_sc.apparmor.profile_type = api_pb2.SecurityProfile.Unconfined
            linux_sc.apparmor_profile = "unconfined"
        elif kind == "RuntimeDefault":
            linux_sc.apparmor.profile_type = api_pb2.SecurityProfile.RuntimeDefault
            linux_sc.apparmor_profile = "runtime/default"
        else:
            raise SystemExit(f"container {c['name']}: appArmorProfile {kind} is not played here")
    limits = c.get("resources", {}).get("limits", {})
    resources = api_pb2.LinuxContainerResources()
    if "memory" in limits:
        resources.memory_limit_in_bytes = quantity(limits["memory"])
    return api_pb2.ContainerConfig(
        metadata=api_pb2.ContainerMetadata(name=c["name"], attempt=attempt),
        image=api_pb2.ImageSpec(image=c["image"]),
        command=c.get("command", []),
        args=c.get("args", []),
        envs=env_of(c, secrets),
        mounts=mounts,
        log_path=f"{c['name']}.log",
        linux=api_pb2.LinuxContainerConfig(resources=resources, security_context=linux_sc),
    )


def quantity(q):
    units = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}
    for u, n in units.items():
        if q.endswith(u):
            return int(q[: -len(u)]) * n
    return int(q)


def wait_exited(rt, cid, limit):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        st = rt.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=cid),
                                timeout=DEADLINE_S).status
        if st.state == api_pb2.CONTAINER_EXITED:
            return st
        time.sleep(0.1)
    raise SystemExit(f"container {cid} did not exit within {limit} s")


def up(rt, manifest, root, setup):
    ds = daemonset(manifest)
    pod = ds["spec"]["template"]["spec"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    name = setup["name"]
    start = time.monotonic()
    logs = os.path.join(root, "logs")
    os.makedirs(logs, exist_ok=True)
    sandbox = api_pb2.PodSandboxConfig(
        metadata=api_pb2.PodSandboxMetadata(name=name, namespace=ds["metadata"]["namespace"],
                                            uid=f"uid-{name}", attempt=0),
        # kubelet names the sandbox's host only in a UTS namespace of its
        # own: a host-network pod has the node's.
        hostname="" if pod.get("hostNetwork") else name,
        log_directory=logs,
        labels=labels,
        linux=api_pb2.LinuxPodSandboxConfig(
            security_context=api_pb2.LinuxSandboxSecurityContext(namespace_options=namespaces(pod))
        ),
    )
    pod_id = rt.RunPodSandbox(api_pb2.RunPodSandboxRequest(config=sandbox),
                              timeout=DEADLINE_S).pod_sandbox_id
    paths = volume_paths(pod, root, setup.get("configmaps", {}), setup.get("hostpaths", {}))
    secrets = setup.get("secrets", {})
    out = {"pod": pod_id, "init": [], "containers": {}}
    for c in pod.get("initContainers", []):
        cid = create_start(rt, pod_id, sandbox, container_config(c, pod, paths, secrets, root))
        st = wait_exited(rt, cid, 60)
        log = read_log(logs, c["name"])
        out["init"].append({"name": c["name"], "exit_code": st.exit_code, "log": log})
        if st.exit_code != 0:
            out["seconds"] = time.monotonic() - start
            return out  # kubelet would restart it; the test wants to see why
    for c in pod["containers"]:
        out["containers"][c["name"]] = create_start(
            rt, pod_id, sandbox, container_config(c, pod, paths, secrets, root))
    out["seconds"] = time.monotonic() - start
    return out


def read_log(logs, name):
    try:
        with open(os.path.join(logs, f"{name}.log")) as f:
            return f.read()
    except OSError:
        return ""


def create_start(rt, pod_id, sandbox, config):
    cid = rt.CreateContainer(api_pb2.CreateContainerRequest(
        pod_sandbox_id=pod_id, config=config, sandbox_config=sandbox), timeout=DEADLINE_S
    ).container_id
    rt.StartContainer(api_pb2.StartContainerRequest(container_id=cid), timeout=DEADLINE_S)
    return cid


def probe_once(rt, cid, probe):
    cmd = probe["exec"]["command"]
    r = rt.ExecSync(api_pb2.ExecSyncRequest(container_id=cid, cmd=cmd,
                                            timeout=probe.get("timeoutSeconds", 1)),
                    timeout=DEADLINE_S)
    return {"exit_code": r.exit_code, "stdout": r.stdout.decode(errors="replace"),
            "stderr": r.stderr.decode(errors="replace")}


def until_probe(rt, cid, probe):
    start = time.monotonic()
    last = None
    for attempt in range(1, probe.get("failureThreshold", 3) + 1):
        last = probe_once(rt, cid, probe)
        if last["exit_code"] == 0:
            return {"ok": True, "attempts": attempt, "seconds": time.monotonic() - start,
                    "last": last}
        time.sleep(probe.get("periodSeconds", 10))
    return {"ok": False, "attempts": probe.get("failureThreshold", 3),
            "seconds": time.monotonic() - start, "last": last}


def down(rt, pod_id, grace):
    listed = rt.ListContainers(api_pb2.ListContainersRequest(
        filter=api_pb2.ContainerFilter(pod_sandbox_id=pod_id)), timeout=DEADLINE_S).containers
    stopped = []
    for c in listed:
        if c.state == api_pb2.CONTAINER_RUNNING:
            rt.StopContainer(api_pb2.StopContainerRequest(container_id=c.id, timeout=grace),
                             timeout=DEADLINE_S + grace)
            st = rt.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=c.id),
                                    timeout=DEADLINE_S).status
            stopped.append({"name": c.metadata.name, "exit_code": st.exit_code,
                            "reason": st.reason})
    rt.StopPodSandbox(api_pb2.StopPodSandboxRequest(pod_sandbox_id=pod_id), timeout=DEADLINE_S)
    rt.RemovePodSandbox(api_pb2.RemovePodSandboxRequest(pod_sandbox_id=pod_id),
                        timeout=DEADLINE_S)
    return {"stopped": stopped}


def main():
    sock, cmd, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    if cmd == "yaml2json":
        print(json.dumps(docs(args[0])))
        return
    channel = grpc.insecure_channel("unix://" + sock)
    rt = api_pb2_grpc.RuntimeServiceStub(channel)
    try:
        if cmd == "up":
            manifest, root, setup = args
            out = up(rt, manifest, root, json.loads(setup))
        elif cmd in ("probe", "until-probe"):
            manifest, cid, name, kind = args
            probe = container_spec(manifest, name)[f"{kind}Probe"]
            out = probe_once(rt, cid, probe) if cmd == "probe" else until_probe(rt, cid, probe)
        elif cmd == "down":
            out = down(rt, args[0], int(args[1]))
        elif cmd == "pid":
            r = rt.ContainerStatus(api_pb2.ContainerStatusRequest(container_id=args[0],
                                                                  verbose=True),
                                   timeout=DEADLINE_S)
            out = {"pid": json.loads(r.info.get("info", "{}")).get("pid", 0)}
        else:
            raise SystemExit("unknown command " + cmd)
    except grpc.RpcError as e:
        print(json.dumps({"error": e.details(), "code": str(e.code())}))
        sys.exit(1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
