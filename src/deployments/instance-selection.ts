/**
 * Instance selection, as pure rules (DESIGN.md §3): how much GPU memory a model needs, and the
 * cheapest placement with enough memory and free GPUs.
 */

/** Bytes per parameter of each quantization (Xinference's names). */
const BYTES_PER_PARAMETER: Record<string, number> = {
  none: 2, // fp16 / bf16
  '8-bit': 1,
  Int8: 1,
  Q8_0: 1,
  Q5_K_M: 0.625,
  Q5_K: 0.625,
  '4-bit': 0.5,
  Int4: 0.5,
  Q4_K_M: 0.5,
  Q4_K: 0.5,
};

/** Memory the weights need beyond their size: activations and fragmentation. */
const OVERHEAD_FACTOR = 1.2;
/** Room for the KV cache of a useful context. */
const KV_CACHE_HEADROOM_GB = 2;
/** Tensor parallelism splits a model over 1, 2, 4 or 8 GPUs of one instance. */
const GPU_COUNTS = [1, 2, 4, 8];

export function bytesPerParameter(quantization: string): number {
  return BYTES_PER_PARAMETER[quantization] ?? 2;
}

/** GPU memory (GB) a model needs: parameters × bytes per parameter × 1.2 + KV-cache headroom. */
export function requiredGpuMemoryGb(sizeInBillions: number, quantization: string): number {
  const gb = sizeInBillions * bytesPerParameter(quantization) * OVERHEAD_FACTOR + KV_CACHE_HEADROOM_GB;
  return Math.round(gb * 10) / 10;
}

export interface InstanceTypeInfo {
  name: string;
  gpuType: string;
  gpuCount: number;
  gpuMemoryGb: number;
  /** Price of the whole instance, per second, in dollars. */
  pricePerSecond: number;
}

export interface Candidate {
  instanceId: string;
  clusterId: string;
  instanceType: InstanceTypeInfo;
  freeGpus: number;
}

export interface Placement {
  instanceId: string;
  clusterId: string;
  instanceType: InstanceTypeInfo;
  gpuCount: number;
  /** The deployment's share of the instance price, per second. */
  pricePerSecond: number;
  reason: string;
}

export type Selection =
  | { ok: true; placement: Placement }
  | { ok: false; stage: 'instance_selection' | 'capacity'; reason: string };

/** The fewest GPUs of this type that hold the model, or undefined when even all of them do not. */
export function gpusNeeded(type: InstanceTypeInfo, requiredGb: number): number | undefined {
  return GPU_COUNTS.find((count) => count <= type.gpuCount && count * type.gpuMemoryGb >= requiredGb);
}

/**
 * The cheapest placement (by the deployment's share of the instance price) with enough GPU memory
 * and free GPUs; ties go to the instance with the most free GPUs left, then by id, so the same
 * inputs always give the same answer.
 */
export function selectPlacement(candidates: readonly Candidate[], requiredGb: number): Selection {
  const fitting = candidates.flatMap((candidate) => {
    const gpuCount = gpusNeeded(candidate.instanceType, requiredGb);
    if (gpuCount === undefined) return [];
    const pricePerSecond = (candidate.instanceType.pricePerSecond * gpuCount) / candidate.instanceType.gpuCount;
    return [{ candidate, gpuCount, pricePerSecond }];
  });
  if (fitting.length === 0) {
    return {
      ok: false,
      stage: 'instance_selection',
      reason: `No instance type has ${requiredGb} GB of GPU memory on one instance for this model.`,
    };
  }
  const free = fitting.filter(({ candidate, gpuCount }) => candidate.freeGpus >= gpuCount);
  if (free.length === 0) {
    return {
      ok: false,
      stage: 'capacity',
      reason: `Every instance with at least ${requiredGb} GB of GPU memory is fully allocated; try again later.`,
    };
  }
  free.sort(
    (a, b) =>
      a.pricePerSecond - b.pricePerSecond ||
      b.candidate.freeGpus - b.gpuCount - (a.candidate.freeGpus - a.gpuCount) ||
      a.candidate.instanceId.localeCompare(b.candidate.instanceId),
  );
  const best = free[0];
  if (!best) throw new Error('unreachable');
  const type = best.candidate.instanceType;
  const reason =
    `${type.name} is the cheapest instance type with free capacity and at least ${requiredGb} GB of GPU memory ` +
    `(${best.gpuCount} x ${type.gpuType}, ${best.gpuCount * type.gpuMemoryGb} GB) at $${best.pricePerSecond.toFixed(6)}/s.`;
  return {
    ok: true,
    placement: {
      instanceId: best.candidate.instanceId,
      clusterId: best.candidate.clusterId,
      instanceType: type,
      gpuCount: best.gpuCount,
      pricePerSecond: best.pricePerSecond,
      reason,
    },
  };
}
