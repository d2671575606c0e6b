"""The node checks' parsers (training/cluster/node_checks.py) on outputs shaped as the tools print them: nvidia-smi -q's
GPU ATTRIBUTES (field names from the nvidia-smi man page, driver 550, and NVIDIA's A100 memory error management
guide), the kernel's Xid lines (the format of that guide's Table 3) and ibstat's ports (rdma-core
infiniband-diags/ibstat.c, ca_dump and port_dump)."""
from training.cluster import gpu_check, node_checks

HEALTHY_GPU = """
==============NVSMI LOG==============

Timestamp                                 : Sun Dec  6 09:00:00 2026
Driver Version                            : 580.159.04
Attached GPUs                             : 2
GPU 00000001:00:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : 12
            DRAM Uncorrectable            : 0
        Aggregate
            SRAM Correctable              : 0
            SRAM Uncorrectable Parity     : 0
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Correctable              : 40
            DRAM Uncorrectable            : 2
    Retired Pages
        Single Bit ECC                    : N/A
        Double Bit ECC                    : N/A
        Pending Page Blacklist            : N/A
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 2
        Pending                           : No
        Remapping Failure Occurred        : No
"""
SICK_GPU = """GPU 00000002:00:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    ECC Errors
        Volatile
            SRAM Uncorrectable SEC-DED    : 0
            DRAM Uncorrectable            : 3
    Retired Pages
        Single Bit ECC                    : 0
        Double Bit ECC                    : 1
        Pending Page Blacklist            : Yes
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 3
        Pending                           : Yes
        Remapping Failure Occurred        : No
"""
IBSTAT = """CA 'mlx5_0'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tHardware version: 0
\tNode GUID: 0x946dae0300a1b2c4
\tSystem image GUID: 0x946dae0300a1b2c4
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 400
\t\tBase lid: 1203
\t\tLMC: 0
\t\tSM lid: 1
\t\tCapability mask: 0xa651e848
\t\tPort GUID: 0x946dae0300a1b2c4
\t\tLink layer: InfiniBand
CA 'mlx5_1'
\tCA type: MT4129
\tNumber of ports: 1
\tPort 1:
\t\tState: Down
\t\tPhysical state: Polling
\t\tRate: 10
\t\tLink layer: InfiniBand
CA 'mlx5_2'
\tCA type: MT4129
\tNumber of ports: 1
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 200
\t\tLink layer: InfiniBand
CA 'mlx5_an0'
\tCA type: MT4126
\tPort 1:
\t\tState: Active
\t\tPhysical state: LinkUp
\t\tRate: 40
\t\tLink layer: Ethernet
"""
KERNEL_LOG = """[  812.331] NVRM: Xid (PCI:0000:01:00): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
[  812.402] NVRM: Xid (PCI:0000:01:00): 94, pid=7194, Contained: CE User Channel (0x9). RST: No, D-RST: No
[  900.000] NVRM: Xid (PCI:0002:00:00): 79, pid=0, GPU has fallen off the bus.
[  901.000] NVRM: Xid (PCI:0003:00:00): 13, pid=88, Graphics Exception: ESR 0x4041b0=0x3f20
"""


def test_a_healthy_gpus_counts_are_not_faults_and_a_sick_ones_are_named():
    # aggregate (lifetime) uncorrectables and remapped rows already done are history, not a fault now
    assert node_checks.smi_problems(HEALTHY_GPU) == []
    assert node_checks.smi_problems(HEALTHY_GPU + SICK_GPU) == [
        "GPU 00000002:00:00.0: ECC Errors / Volatile / DRAM Uncorrectable = 3",
        "GPU 00000002:00:00.0: Retired Pages / Pending Page Blacklist (a page retirement waits for a reset)",
        "GPU 00000002:00:00.0: Remapped Rows / Pending"]


def test_fatal_xids_are_named_once_per_gpu_and_others_are_not():
    assert node_checks.xid_problems(KERNEL_LOG) == ["GPU 0000:01:00: Xid 94 (contained ECC error)",
                                                    "GPU 0002:00:00: Xid 79 (GPU fallen off the bus)"]


def test_an_infiniband_port_down_or_slow_fails_and_ethernet_is_left_out():
    ports = node_checks.ib_ports(IBSTAT)
    assert [(p["ca"], p["state"], p["rate"], p["link_layer"]) for p in ports] == [
        ("mlx5_0", "Active", 400.0, "InfiniBand"), ("mlx5_1", "Down", 10.0, "InfiniBand"),
        ("mlx5_2", "Active", 200.0, "InfiniBand"), ("mlx5_an0", "Active", 40.0, "Ethernet")]
    assert node_checks.ib_problems(IBSTAT) == ["mlx5_1 port 1: Down / Polling (not Active / LinkUp)"]
    assert node_checks.ib_problems(IBSTAT, min_rate=400) == [
        "mlx5_1 port 1: Down / Polling (not Active / LinkUp)", "mlx5_2 port 1: rate 200 Gb/s, below 400"]


def test_a_node_with_a_sick_gpu_fails_the_attempts_gpu_check_and_missing_tools_do_not():
    outputs = {"10.0.0.4": {"nvidia-smi": (0, HEALTHY_GPU), "dmesg": (1, "dmesg: read kernel buffer failed"),
                            "ibstat": (127, "")},
               "10.0.0.5": {"nvidia-smi": (0, HEALTHY_GPU), "dmesg": (0, KERNEL_LOG), "ibstat": (0, IBSTAT)}}

    def deep(host, local):
        return node_checks.check(host, local, run=lambda h, _: outputs[h])

    listing = (0, "0, 00000001:00:00.0\n1, 00000002:00:00.0\n")
    bad = gpu_check.failing([("10.0.0.4", 2), ("10.0.0.5", 2)], lambda h: False, lambda h, local: listing, deep=deep)
    assert [host for host, _ in bad] == ["10.0.0.5"]
    assert bad[0][1] == ("GPU 0000:01:00: Xid 94 (contained ECC error); GPU 0002:00:00: Xid 79 (GPU fallen off the "
                         "bus); mlx5_1 port 1: Down / Polling (not Active / LinkUp)")


def test_the_nodes_are_checked_at_once_not_one_after_another():
    import threading
    import time

    inside, most = [0], [0]
    lock = threading.Lock()

    def run(host, local):
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.2)
        with lock:
            inside[0] -= 1
        return 0, "0, 00000001:00:00.0\n"

    hosts = [(f"10.0.0.{i}", 1) for i in range(8)]
    began = time.monotonic()
    assert gpu_check.failing(hosts, lambda h: False, run, deep=lambda h, local: "sick" if h == "10.0.0.3" else None) \
        == [("10.0.0.3", "sick")]  # in the hosts' order
    assert most[0] == 8 and time.monotonic() - began < 1.2  # 8 x 0.2 s one after another would be 1.6 s
