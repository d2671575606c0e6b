#!/bin/bash
# local_volume.sh MOUNT_POINT: make this node's local data volume at MOUNT_POINT, as root (the Batch pool's start
# task runs it with elevationLevel admin, on the host, at every start: after a reboot too). dataTier node-local's
# `python -m training node-stage ... --dest MOUNT_POINT` then fills it (docs/data.md, "Staging on the nodes").
#
#   bash local_volume.sh "$AZ_BATCH_NODE_SHARED_DIR/local-data"     (or: bash -c "$TEXT" local_volume.sh MOUNT_POINT)
#
# What it does, printing one line (what it did, the drives, the size); exit 1 with one line on stderr otherwise:
# - MOUNT_POINT already mounted: nothing changes (a second run, or a start task run again without a reboot).
# - The VM's local NVMe drives, found by model rather than by name: Azure's directly attached local disks report
#   the model "Microsoft NVMe Direct Disk" (LSv2/LSv3 generation) or "Microsoft NVMe Direct Disk v2" (v6 and newer
#   sizes), while the OS and data disks on NVMe report "MSFT NVMe Accelerator v1.0" (Azure/azure-vm-utils
#   doc/disk-identification.md and udev/80-azure-disk.rules; learn.microsoft.com/azure/virtual-machines/linux/
#   azure-virtual-machine-utilities). Device names (nvme0n1...) are not stable across sizes and boots, so they
#   decide nothing. A drive that is mounted, holds partitions, swap or another array is left alone.
# - Two or more drives: one mdadm RAID0 array (/dev/md/dltrain-data, 512 KiB chunks) striped over them; one drive:
#   the drive itself. An array whose drives carry its superblock is assembled, never created again (a reboot
#   keeps the temp NVMe's data; the kernel may have assembled it already under another name, found through the
#   drives' holders). After a stop/deallocation or a host change the drives come back raw ("the VMs start up
#   with ... raw temp disks": learn.microsoft.com/azure/virtual-machines/enable-nvme-temp-faqs), so the array is
#   created and formatted again and node-stage copies the dataset again (its marker went with the old volume).
# - A filesystem, made only when the device has none: XFS when mkfs.xfs is there, else ext4. XFS because its mkfs
#   writes a few metadata blocks whatever the size (ND H100 v5: 8 drives, ~28 TB), where ext4 initialises inode
#   tables over the whole volume (at mkfs, or lazily in the background for a long while after the mount,
#   competing with the staging's writes); its allocation groups also let node-stage's parallel writers and the
#   ranks' readers work side by side. Neither mkfs discards the drives first (-K, nodiscard): fresh temp disks
#   are empty, and a discard over terabytes only adds minutes to a node's start.
# - Mounted at MOUNT_POINT (noatime: the trainer's reads write nothing). Under AZ_BATCH_NODE_SHARED_DIR, inside
#   the node's root folder, which Batch's task containers see.
# - No local NVMe drive: MOUNT_POINT is a plain folder where it is, on the VM's temporary disk, where Batch keeps
#   its node folders (learn.microsoft.com/azure/batch/files-and-directories).
# Tests only: LOCAL_VOLUME_TEST_DRIVES, when set, replaces the model-based discovery by the block devices it names
# (loop devices); every other step is the same.
set -euo pipefail

NAME="dltrain-data"  # the array's name and the filesystem's label (XFS labels hold at most 12 characters)
LOCAL_MODEL="Microsoft NVMe Direct Disk"  # v1 and v2 (the latter's model adds " v2")
CHUNK="512K"

say() { echo "local_volume: $*"; }
fail() { echo "local_volume: error: $*" >&2; exit 1; }

mount_point="${1:-}"
[[ $# -eq 1 && "$mount_point" == /* ]] || fail "usage: local_volume.sh MOUNT_POINT (an absolute path)"
[[ "$(id -u)" -eq 0 ]] || fail "must run as root (the start task's userIdentity needs elevationLevel admin)"

human() {  # bytes -> "27.9 TB"
  awk -v b="$1" 'BEGIN { split("B KB MB GB TB PB", u, " "); i = 1; while (b >= 1000 && i < 6) { b /= 1000; i++ }
                         printf "%.1f %s", b, u[i] }'
}

if findmnt --mountpoint "$mount_point" >/dev/null 2>&1; then
  source_device="$(findmnt --noheadings --output SOURCE --mountpoint "$mount_point")"
  say "$mount_point is mounted already ($source_device, $(human "$(blockdev --getsize64 "$source_device" 2>/dev/null \
    || echo 0)")): nothing changed"
  exit 0
fi

# The candidate drives: Azure's local NVMe disks by model, or (tests) the devices named.
candidates=()
if [[ -n "${LOCAL_VOLUME_TEST_DRIVES+set}" ]]; then
  read -r -a candidates <<<"$LOCAL_VOLUME_TEST_DRIVES"
else
  for sys in /sys/block/nvme*; do
    [[ -r "$sys/device/model" ]] || continue
    model="$(tr -s ' ' <"$sys/device/model")"
    model="${model% }"
    if [[ "$model" == "$LOCAL_MODEL" || "$model" == "$LOCAL_MODEL "* ]]; then
      candidates+=("/dev/${sys##*/}")
    fi
  done
fi

# Leave alone any drive in use: mounted (itself or a partition: the OS disk), partitioned, swap, or in an array
# other than ours.
drives=()
array=""  # an array of ours that is active already (assembled at boot)
for drive in "${candidates[@]}"; do
  [[ -b "$drive" ]] || continue
  if [[ -n "$(lsblk --noheadings --list --output MOUNTPOINT "$drive" | tr -d '[:space:]')" ]] \
      || lsblk --noheadings --list --output TYPE "$drive" | grep -qx part; then
    continue
  fi
  holders=(/sys/class/block/"$(basename "$(readlink -f "$drive")")"/holders/*)
  if [[ -e "${holders[0]}" ]]; then
    holder="/dev/${holders[0]##*/}"
    if mdadm --detail "$holder" 2>/dev/null | grep -Eq "Name : (.*:)?$NAME( |$)"; then
      array="$holder"
      drives+=("$drive")
    fi
    continue
  fi
  drives+=("$drive")
done

if [[ ${#drives[@]} -eq 0 ]]; then
  mkdir -p "$mount_point"
  say "no local NVMe drive: $mount_point is a folder on $(findmnt --noheadings --output SOURCE --target \
"$mount_point") ($(human "$(df --output=avail -B1 "$mount_point" | tail -n 1)") free)"
  exit 0
fi

names="$(for d in "${drives[@]}"; do printf '%s ' "${d##*/}"; done)"
names="${names% }"
if [[ ${#drives[@]} -eq 1 ]]; then
  device="${drives[0]}"
  how="1 NVMe drive ($names)"
else
  command -v mdadm >/dev/null || fail "${#drives[@]} local NVMe drives ($names) and no mdadm to stripe them: \
install it in the pool's image (apt-get install mdadm)"
  if [[ -n "$array" ]]; then
    device="$array"
    action="found assembled"
  elif mdadm --examine --brief "${drives[0]}" 2>/dev/null | grep -Eq "name=(.*:)?$NAME( |$)" \
      && mdadm --assemble "/dev/md/$NAME" "${drives[@]}" --run >/dev/null 2>&1; then
    device="/dev/md/$NAME"
    action="assembled"
  else
    # Raw drives (a new VM, or one that came back from deallocation): the array is made. --run: no question.
    mdadm --create "/dev/md/$NAME" --name="$NAME" --level=0 --chunk="$CHUNK" --raid-devices="${#drives[@]}" \
      --run "${drives[@]}" </dev/null >/dev/null 2>&1 || fail "mdadm could not stripe $names: run \
mdadm --create /dev/md/$NAME --level=0 --raid-devices=${#drives[@]} ${drives[*]} by hand to see why"
    device="/dev/md/$NAME"
    action="created"
  fi
  how="RAID0 of ${#drives[@]} NVMe drives ($names), $action"
  # /dev/md/NAME is udev's link to the array's /dev/mdN, made by a rule after mdadm returns (mdadm's own wait for it
  # is bounded: mdadm(8), "--create"/"udev"); settle first so the blkid and mkfs below find it.
  if command -v udevadm >/dev/null; then udevadm settle --timeout=30 || true; fi
  [[ -b "$device" ]] || fail "$device is missing after the array was $action: mdadm --detail --scan lists the arrays"
fi

fstype="$(blkid --output value --match-tag TYPE "$device" 2>/dev/null || true)"
if [[ -z "$fstype" ]]; then
  if command -v mkfs.xfs >/dev/null; then
    mkfs.xfs -q -f -K -L "$NAME" "$device" || fail "mkfs.xfs failed on $device"
    fstype="xfs"
  else
    mkfs.ext4 -q -F -m 0 -L "$NAME" -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$device" \
      || fail "mkfs.ext4 failed on $device"
    fstype="ext4"
  fi
  how="$how, formatted $fstype"
else
  label="$(blkid --output value --match-tag LABEL "$device" 2>/dev/null || true)"
  [[ "$label" == "$NAME" ]] || fail "$device holds a $fstype filesystem labelled '${label}', not this script's \
'$NAME': it is left alone; wipe it (wipefs -a $device) if it may go"
  how="$how, its $fstype kept"
fi

mkdir -p "$mount_point"
mount -o noatime "$device" "$mount_point" || fail "could not mount $device at $mount_point"
say "$mount_point: $how, mounted: $(human "$(blockdev --getsize64 "$device")")"
