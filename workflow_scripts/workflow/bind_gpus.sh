# bind_gpus N: give this job N GPUs of its own, for as long as it runs (gpu_binding.py).
#
# Sourced by every job of a local run (rules/common.smk); a rule whose job uses GPUs calls it
# first with its `gpu` resource. XSTILTS_GPUS lists the devices of the run (`--resources
# gpu=G`: the first G), XSTILTS_GPU_LOCKS the folder of their lock files. A job locks N of
# them with flock on file descriptors that the job's processes inherit, so a lock lasts
# exactly as long as the job, whatever ends it; it then sees only its own devices through
# CUDA_VISIBLE_DEVICES. Snakemake never runs more than G GPU jobs at once, so a free device
# exists unless another run on this machine holds it: then the job waits, holding none.
# A job that takes no GPU sees none. Outside such a run (no XSTILTS_GPUS: Slurm, or no
# --resources gpu) it does nothing.
bind_gpus() {
    [ -n "${XSTILTS_GPUS:-}" ] || return 0
    local want="${1:-0}"
    if [ "$want" -eq 0 ]; then
        export CUDA_VISIBLE_DEVICES=""
        return 0
    fi
    local IFS=,
    local -a devices=($XSTILTS_GPUS) taken fds
    local fd device waited=0
    if [ "$want" -gt "${#devices[@]}" ]; then
        echo "bind_gpus: this job takes $want GPUs; the run has ${#devices[@]} (--resources gpu=${#devices[@]})" >&2
        return 1
    fi
    if ! command -v flock > /dev/null; then
        echo "bind_gpus: flock (util-linux) is not installed; run without --resources gpu=N or install it" >&2
        return 1
    fi
    mkdir -p "$XSTILTS_GPU_LOCKS"
    while :; do
        taken=()
        fds=()
        for device in "${devices[@]}"; do
            exec {fd}>>"$XSTILTS_GPU_LOCKS/gpu-$device.lock"
            if flock -n "$fd"; then
                taken+=("$device")
                fds+=("$fd")
                [ "${#taken[@]}" -lt "$want" ] || break
            else
                exec {fd}>&-
            fi
        done
        [ "${#taken[@]}" -lt "$want" ] || break
        for fd in "${fds[@]}"; do exec {fd}>&-; done
        [ "$waited" -eq 1 ] || echo "bind_gpus: waiting for $want free GPU(s) of $XSTILTS_GPUS, held by other jobs on this machine" >&2
        waited=1
        sleep 2
    done
    export CUDA_VISIBLE_DEVICES="${taken[*]}"
}
