# bind_gpus N [SLOTS]: give this job N GPUs of its own, or (N = 0) SLOTS slots of one GPU,
# for as long as it runs (gpu_binding.py, gpu_sharing.py).
#
# Sourced by every job of a local run (rules/common.smk); a rule whose job uses GPUs calls it
# first with its `gpu` and `gpu_slots` resources. XSTILTS_GPUS lists the devices of the run
# (`--resources gpu=G`: the first G), XSTILTS_GPU_SLOTS the slots of each (gpu_sharing's
# jobs_per_gpu; 1 without sharing), XSTILTS_GPU_LOCKS the folder of their lock files, one
# per device and one per slot. A job locks with flock on file descriptors that the job's
# processes inherit, so a lock lasts exactly as long as the job, whatever ends it: a
# whole-GPU job the device lock of each of its devices, exclusively; a shared job the device
# lock of one device, shared, and SLOTS of its slot locks (the first device that has them,
# so that shared jobs fill one GPU before the next). It then sees only its own devices through
# CUDA_VISIBLE_DEVICES. Snakemake never starts more than the run's slots hold, so free slots
# exist unless another run on this machine holds them, or shared jobs are spread so that no
# device is whole: then the job waits, holding none.
# A job that takes no GPU sees none. Outside such a run (no XSTILTS_GPUS: Slurm, or no
# --resources gpu) it does nothing.

# _bind_device DEVICE SLOTS: take DEVICE whole (SLOTS 0: its device lock, exclusive) or
# SLOTS of its slots (the device lock shared, so that no whole-GPU job of any run takes it
# meanwhile, and SLOTS slot locks); their descriptors are appended to _bound_fds. Fails,
# holding none of them, if DEVICE cannot give that now.
_bind_device() {
    local device="$1" count="$2" slot fd lock taken=0
    local -a mine=()
    exec {lock}>>"$XSTILTS_GPU_LOCKS/gpu-$device.lock"
    if [ "$count" -eq 0 ]; then
        if flock -x -n "$lock"; then
            _bound_fds+=("$lock")
            return 0
        fi
        exec {lock}>&-
        return 1
    fi
    if ! flock -s -n "$lock"; then
        exec {lock}>&-
        return 1
    fi
    mine=("$lock")
    for ((slot = 0; slot < ${XSTILTS_GPU_SLOTS:-1}; slot++)); do
        exec {fd}>>"$XSTILTS_GPU_LOCKS/gpu-$device.slot$slot.lock"
        if flock -n "$fd"; then
            mine+=("$fd")
            taken=$((taken + 1))
            [ "$taken" -lt "$count" ] || break
        else
            exec {fd}>&-
        fi
    done
    if [ "$taken" -lt "$count" ]; then
        for fd in "${mine[@]}"; do exec {fd}>&-; done
        return 1
    fi
    _bound_fds+=("${mine[@]}")
}

bind_gpus() {
    [ -n "${XSTILTS_GPUS:-}" ] || return 0
    local want="${1:-0}" slots="${2:-0}"
    local per_gpu="${XSTILTS_GPU_SLOTS:-1}"
    if [ "$want" -eq 0 ] && [ "$slots" -eq 0 ]; then
        export CUDA_VISIBLE_DEVICES=""
        return 0
    fi
    local IFS=,
    local -a devices=($XSTILTS_GPUS) taken
    local fd device waited=0 devices_wanted=1 slots_each="$slots"
    if [ "$want" -gt 0 ]; then  # whole GPUs: each device's lock, exclusive
        devices_wanted="$want"
        slots_each=0
    fi
    if [ "$devices_wanted" -gt "${#devices[@]}" ]; then
        echo "bind_gpus: this job takes $want GPUs; the run has ${#devices[@]} (--resources gpu=${#devices[@]})" >&2
        return 1
    fi
    if [ "$slots_each" -gt "$per_gpu" ]; then
        echo "bind_gpus: this job takes $slots_each slots of a GPU; a GPU of the run has $per_gpu" >&2
        return 1
    fi
    if ! command -v flock > /dev/null; then
        echo "bind_gpus: flock (util-linux) is not installed; run without --resources gpu=N or install it" >&2
        return 1
    fi
    mkdir -p "$XSTILTS_GPU_LOCKS"
    while :; do
        taken=()
        _bound_fds=()
        for device in "${devices[@]}"; do
            if _bind_device "$device" "$slots_each"; then
                taken+=("$device")
                [ "${#taken[@]}" -lt "$devices_wanted" ] || break
            fi
        done
        [ "${#taken[@]}" -lt "$devices_wanted" ] || break
        for fd in "${_bound_fds[@]}"; do exec {fd}>&-; done
        [ "$waited" -eq 1 ] || echo "bind_gpus: waiting for free GPU slots of $XSTILTS_GPUS, held by other jobs on this machine" >&2
        waited=1
        sleep 2
    done
    export CUDA_VISIBLE_DEVICES="${taken[*]}"
}
