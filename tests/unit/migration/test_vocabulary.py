"""KubeVirt's migration vocabulary: MigrationOptions as virt-handler sends them, the Domain's
Migration metadata as virt-handler reads it, the proxies' socket names."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ch_launcher.kubevirt import migration as km
from ch_launcher.kubevirt.domain import DomainView, LifeCycle, Reason, domain_dict
from ch_launcher.kubevirt.vmi import parse_vmi
from ch_launcher.kubevirt.vmi_status import MigrationPeerState, MigrationState
from tests.builders import new_vmi, with_memory, with_namespace, with_status, with_uid

VIRT_HANDLER_DEFAULTS = {
    "Bandwidth": "0", "ProgressTimeout": 150, "CompletionTimeoutPerGiB": 150, "MaxDowntimeMs": 900,
    "UnsafeMigration": False, "AllowAutoConverge": False, "AllowPostCopy": False, "ParallelMigrationThreads": 8,
    "AllowWorkloadDisruption": False, "StallDetectorOptions": None, "Compression": None, "DowntimeTuning": None,
}


def test_virt_handlers_default_options_map_to_cloud_hypervisors_send_migration():
    options = km.MigrationOptions.decode(json.dumps(VIRT_HANDLER_DEFAULTS).encode())
    assert options.bandwidth == 0 and options.parallel_migration_threads == 8
    assert options.send_migration_data("unix:/p/out.sock", data_gb=3) == {
        "destination_url": "unix:/p/out.sock", "connections": 1, "downtime_ms": 900, "timeout_s": 450,
        "timeout_strategy": "Cancel"}
    assert options.degradations() == [
        ("ParallelMigrationThreads=8: one connection (Cloud Hypervisor opens several only over tcp: URLs; "
         "KubeVirt's proxies carry unix sockets)")]


def test_workload_disruption_pauses_the_guest_to_finish_and_post_copy_is_degraded():
    options = km.MigrationOptions.decode(json.dumps({**VIRT_HANDLER_DEFAULTS, "AllowPostCopy": True,
                                                     "AllowWorkloadDisruption": True, "Compression": "zstd",
                                                     "AllowAutoConverge": True, "Bandwidth": "64Mi"}).encode())
    assert options.bandwidth == 64 << 20
    assert options.send_migration_data("unix:/x", 1)["timeout_strategy"] == "Ignore"
    notes = " | ".join(options.degradations())
    assert "AllowPostCopy: pre-copy only" in notes and "the guest is paused to finish instead" in notes
    assert "Compression=zstd" in notes and "AllowAutoConverge" in notes


@pytest.mark.parametrize("payload, words", [
    (b"", "migration options object not present in command server request"),
    (b"[1]", "no valid migration options object present in command server request"),
    (b'{"ProgressTimeout": "soon"}', "MigrationOptions.ProgressTimeout"),
    (b'{"AllowPostCopy": 1}', "MigrationOptions.AllowPostCopy of type bool"),
])
def test_options_that_go_would_not_unmarshal_are_refused_in_its_words(payload, words):
    with pytest.raises(km.InvalidOptions) as refused:
        km.MigrationOptions.decode(payload)
    assert words in str(refused.value)


def test_unknown_fields_and_nulls_are_what_go_makes_of_them():
    options = km.MigrationOptions.decode(b'{"Bandwidth": null, "SomethingNew": 1, "MaxDowntimeMs": null}')
    assert options.bandwidth == 0 and options.max_downtime_ms == 0
    assert "downtime_ms" not in options.send_migration_data("unix:/x", 1), "Cloud Hypervisor's own default"


def test_the_metadata_reads_as_gos_migration_metadata_and_ends_once():
    meta = km.MigrationMetadata(uid="m-1", start="2026-12-01T10:00:00Z")
    assert meta.to_dict() == {"UID": "m-1", "StartTimestamp": "2026-12-01T10:00:00Z", "EndTimestamp": None,
                              "Failed": False, "FailureReason": "", "AbortStatus": "", "Mode": "PreCopy"}
    aborted = km.MigrationMetadata(uid="m-1", start="2026-12-01T10:00:00Z", abort_status=km.ABORT_SUCCEEDED)
    ended = aborted.finished("2026-12-01T10:00:05Z", failed=True, reason="Broken pipe")
    assert ended.failure_reason == "Live migration has been aborted", "setMigrationResult's words after an abort"
    assert ended.finished("2026-12-01T10:09:00Z", failed=False) is ended, "reported once"
    view = DomainView(name="v", namespace="ns", uid="u", status=LifeCycle.SHUTOFF, reason=Reason.MIGRATED,
                      migration=ended)
    assert domain_dict(view)["Spec"]["Metadata"]["KubeVirt"]["Migration"]["EndTimestamp"] == "2026-12-01T10:00:05Z"


def test_socket_names_and_uids_follow_virt_handler():
    assert km.proxy_socket("/var/run/kubevirt", "abc") == "/var/run/kubevirt/migrationproxy/abc-49152-source.sock"
    assert km.proxy_socket("/var/run/kubevirt", "abc", 0) == "/var/run/kubevirt/migrationproxy/abc-source.sock"
    vmi = parse_vmi({"metadata": {"name": "v", "namespace": "ns", "uid": "target-uid"},
                     "spec": {"domain": {"memory": {"guest": "1500Mi"}}},
                     "status": {"migrationTransport": "Unix",
                                "migrationState": {"migrationUid": "m", "sourceState": {
                                    "migrationUID": "src-m", "virtualMachineInstanceUID": "source-uid"}}}})
    assert km.migration_uid(vmi) == "src-m"
    assert km.target_proxy_uid(vmi) == "source-uid", "decentralized over unix: the source's sockets"
    assert km.data_size_gb(vmi) == 2, "1500Mi is 1.57 GB, rounded up as ScaledValue(Giga) does"


# The json tags of `VirtualMachineInstanceMigrationState` and of the decentralized peer states
# (`VirtualMachineInstanceCommonMigrationState` and the fields `...SourceState` /
# `...TargetState` add), kubevirt staging/src/kubevirt.io/api/core/v1/types.go@d923fdb815cd.
GO_MIGRATION_STATE_KEYS = {
    "startTimestamp", "endTimestamp", "targetNodeDomainReadyTimestamp", "targetNodeDomainDetected",
    "targetNodeAddress", "targetDirectMigrationNodePorts", "targetNode", "targetPod", "targetAttachmentPodUID",
    "sourceNode", "sourcePod", "completed", "failed", "abortRequested", "abortStatus", "failureReason",
    "migrationUid", "mode", "migrationPolicyName", "migrationConfiguration", "targetCPUSet", "targetNodeTopology",
    "sourcePersistentStatePVCName", "targetPersistentStatePVCName", "sourceState", "targetState",
    "migrationNetworkType", "targetMemoryOverhead",
}
GO_PEER_STATE_KEYS = {
    "node", "pod", "migrationUID", "domainName", "domainNamespace", "syncAddress", "persistentStatePVCName",
    "selinuxContext", "virtualMachineInstanceUID", "nodeSelectors", "domainReadyTimestamp", "domainDetected",
    "nodeAddress", "directMigrationNodePorts",
}


def go_vmi(migration_state: dict) -> dict:
    """A VMI during a migration as the API server hands it out (every key as Go's json tags write it)."""
    return new_vmi("v", with_namespace("ns"), with_uid("vmi-uid"), with_memory("64Mi"),
                   with_status(phase="Running", nodeName="node01", migrationMethod="BlockMigration",
                               migrationTransport="Unix", migrationState=migration_state))


# What virt-controller and both virt-handlers have written by the time the source's virt-handler
# calls MigrateVirtualMachine for an ordinary (not decentralized) migration: no sourceState.
LOCAL_MIGRATION_STATE = {
    "migrationUid": "7e5c2c1e-0d3b-4f4e-9a51-2b2f3c1d9e10", "sourceNode": "node01", "targetNode": "node02",
    "sourcePod": "virt-launcher-v-abcde", "targetPod": "virt-launcher-v-fghij", "targetNodeAddress": "10.250.0.2",
    "targetDirectMigrationNodePorts": {"40001": 0, "40002": 49152, "40003": 49153},
    "targetNodeDomainDetected": False, "mode": "PreCopy", "migrationNetworkType": "Pod",
    "migrationConfiguration": {"allowAutoConverge": False, "bandwidthPerMigration": "0",
                               "completionTimeoutPerGiB": 150, "progressTimeout": 150},
    "migrationPolicyName": None, "targetAttachmentPodUID": "", "targetMemoryOverhead": "180Mi",
}


def test_the_model_spells_every_key_as_kubevirts_json_tags():
    # An unknown key is dropped silently (json_extra "ignore"): a misspelt one reads as absent.
    for model, keys in ((MigrationState, GO_MIGRATION_STATE_KEYS), (MigrationPeerState, GO_PEER_STATE_KEYS)):
        names = {f.name for f in dataclasses.fields(model)}
        assert names <= keys, names - keys


def test_the_migration_uid_of_an_ordinary_migration_is_migration_state_migration_uid():
    vmi = parse_vmi(go_vmi(LOCAL_MIGRATION_STATE))
    assert km.migration_uid(vmi) == "7e5c2c1e-0d3b-4f4e-9a51-2b2f3c1d9e10"
    state = vmi.status.migrationState
    assert state is not None and (state.sourceNode, state.targetNode) == ("node01", "node02")
    assert (state.sourcePod, state.targetPod) == ("virt-launcher-v-abcde", "virt-launcher-v-fghij")
    assert km.target_proxy_uid(vmi) == "vmi-uid"


def test_a_decentralized_migration_takes_the_source_states_uid_as_go_does():
    source = {"migrationUID": "src-m", "virtualMachineInstanceUID": "source-uid", "node": "node01",
              "syncAddress": "sync.example:9185"}
    vmi = parse_vmi(go_vmi({**LOCAL_MIGRATION_STATE, "sourceState": source,
                            "targetState": {"migrationUID": "tgt-m", "node": "node02"}}))
    assert km.migration_uid(vmi) == "src-m"
    # Go takes sourceState's even when it is empty (MigrationUID: `if s.SourceState != nil`).
    vmi = parse_vmi(go_vmi({**LOCAL_MIGRATION_STATE, "sourceState": {"node": "node01"}}))
    assert km.migration_uid(vmi) == ""


def test_the_peer_states_key_at_the_top_level_is_not_kubevirts():
    wrong = {k: v for k, v in LOCAL_MIGRATION_STATE.items() if k != "migrationUid"}
    wrong["migrationUID"] = "m"  # what the launcher used to read: no KubeVirt component writes it
    assert km.migration_uid(parse_vmi(go_vmi(wrong))) == ""


def test_a_second_call_for_an_ended_migration_is_answered_in_go_launchers_words():
    meta = km.MigrationMetadata(uid="m-1", start="2026-12-01T10:00:00Z").finished(
        "2026-12-01T10:00:05Z", failed=True, reason="DisksNotLiveMigratable: ...")
    # initializeMigrationMetadata: "migration job %v already executed, finished at %v, failed: %t,
    # abortStatus: %s", the time as metav1.Time prints (time.Time.String)
    assert meta.already_executed() == ("migration job m-1 already executed, finished at 2026-12-01 10:00:05 "
                                       "+0000 UTC, failed: true, abortStatus: ")
