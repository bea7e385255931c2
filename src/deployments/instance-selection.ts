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

/** A candidate with enough GPU memory on one instance: the GPUs it would take and their share of its price. */
interface Fit {
  candidate: Candidate;
  gpuCount: number;
  pricePerSecond: number;
}

/** The candidates with enough GPU memory, of the instance type asked for only when one is (`instanceType`). */
function fitsOf(candidates: readonly Candidate[], requiredGb: number, instanceType?: string | null): Fit[] {
  return candidates.flatMap((candidate) => {
    if (instanceType && candidate.instanceType.name !== instanceType) return [];
    const gpuCount = gpusNeeded(candidate.instanceType, requiredGb);
    if (gpuCount === undefined) return [];
    const pricePerSecond = (candidate.instanceType.pricePerSecond * gpuCount) / candidate.instanceType.gpuCount;
    return [{ candidate, gpuCount, pricePerSecond }];
  });
}

const hasRoom = (fit: Fit) => fit.candidate.freeGpus >= fit.gpuCount;

/** Selection's order: cheapest first, then the most free GPUs left after placing, then by id. */
function bySelectionOrder(a: Fit, b: Fit): number {
  return (
    a.pricePerSecond - b.pricePerSecond ||
    b.candidate.freeGpus - b.gpuCount - (a.candidate.freeGpus - a.gpuCount) ||
    a.candidate.instanceId.localeCompare(b.candidate.instanceId)
  );
}

/**
 * The cheapest placement (by the deployment's share of the instance price) with enough GPU memory
 * and free GPUs; ties go to the instance with the most free GPUs left, then by id, so the same
 * inputs always give the same answer. With `instanceType` (the deployment's `instance_type`), only
 * instances of that type are considered, whatever the others cost.
 */
export function selectPlacement(candidates: readonly Candidate[], requiredGb: number, instanceType?: string | null): Selection {
  return selectFrom(fitsOf(candidates, requiredGb, instanceType), requiredGb, instanceType);
}

function selectFrom(fitting: readonly Fit[], requiredGb: number, instanceType?: string | null): Selection {
  if (fitting.length === 0) {
    return {
      ok: false,
      stage: 'instance_selection',
      reason: instanceType
        ? `The instance type asked for, ${instanceType}, has no ${requiredGb} GB of GPU memory on one instance of a registered cluster for this model.`
        : `No instance type has ${requiredGb} GB of GPU memory on one instance for this model.`,
    };
  }
  const free = fitting.filter(hasRoom);
  if (free.length === 0) {
    return {
      ok: false,
      stage: 'capacity',
      reason: instanceType
        ? `Every ${instanceType} instance (the instance type asked for) with at least ${requiredGb} GB of GPU memory is fully allocated; try again later.`
        : `Every instance with at least ${requiredGb} GB of GPU memory is fully allocated; try again later.`,
    };
  }
  free.sort(bySelectionOrder);
  const best = free[0];
  if (!best) throw new Error('unreachable');
  const type = best.candidate.instanceType;
  const why = instanceType ? 'is the instance type asked for, and has' : 'is the cheapest instance type with';
  const reason =
    `${type.name} ${why} free capacity and at least ${requiredGb} GB of GPU memory ` +
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

/** One instance type of one cluster that holds the model on one instance. */
export interface PlacementChoice {
  clusterId: string;
  instanceType: InstanceTypeInfo;
  /** GPUs the deployment would take on an instance of this type. */
  gpuCount: number;
  /** The deployment's share of the instance's list price, per second: what selection compares. */
  pricePerSecond: number;
  /** The same per hour (`pricePerSecond` × 3600). */
  hourlyPrice: number;
  /** Instances of this type on the cluster, and how many of them have `gpuCount` GPUs free now. */
  instances: number;
  freeInstances: number;
  /** The instance of this type selection would take (or, with none free, the one it prefers). */
  instanceId: string;
}

/**
 * What placing a deployment comes to, as the provisioner decides it: the selection itself, and
 * every (cluster, instance type) with enough GPU memory on one instance, free now or not, in the
 * order selection ranks them (the free ones of a price before the full ones).
 */
export interface PlacementPlan {
  selection: Selection;
  /** Every fitting choice, the selected one included (it has the selection's `instanceId`). */
  choices: PlacementChoice[];
}

export function planPlacement(candidates: readonly Candidate[], requiredGb: number, instanceType?: string | null): PlacementPlan {
  const fitting = fitsOf(candidates, requiredGb, instanceType);
  const groups = new Map<string, Fit[]>();
  for (const fit of fitting) {
    const key = `${fit.candidate.clusterId}\u0000${fit.candidate.instanceType.name}`;
    groups.set(key, [...(groups.get(key) ?? []), fit]);
  }
  const choices = [...groups.values()].map((fits): PlacementChoice => {
    const ranked = [...fits].sort((a, b) => Number(hasRoom(b)) - Number(hasRoom(a)) || bySelectionOrder(a, b));
    const first = ranked[0];
    if (!first) throw new Error('unreachable');
    return {
      clusterId: first.candidate.clusterId,
      instanceType: first.candidate.instanceType,
      gpuCount: first.gpuCount,
      pricePerSecond: first.pricePerSecond,
      hourlyPrice: first.pricePerSecond * 3600,
      instances: fits.length,
      freeInstances: fits.filter(hasRoom).length,
      instanceId: first.candidate.instanceId,
    };
  });
  choices.sort(
    (a, b) =>
      a.pricePerSecond - b.pricePerSecond ||
      Number(b.freeInstances > 0) - Number(a.freeInstances > 0) ||
      a.instanceType.name.localeCompare(b.instanceType.name) ||
      a.clusterId.localeCompare(b.clusterId),
  );
  return { selection: selectFrom(fitting, requiredGb, instanceType), choices };
}

/**
 * How many replicas of `gpuCount` GPUs each fit on the free GPUs of the instances of `instanceType`
 * on `clusterId` now: a replica takes its GPUs from one instance, and the autoscaler places a
 * deployment's replicas on its cluster and instance type only.
 */
export function replicasThatFit(candidates: readonly Candidate[], where: { clusterId: string; instanceType: string; gpuCount: number }): number {
  return candidates
    .filter((candidate) => candidate.clusterId === where.clusterId && candidate.instanceType.name === where.instanceType)
    .reduce((sum, candidate) => sum + Math.floor(Math.max(0, candidate.freeGpus) / where.gpuCount), 0);
}

/** The instance type names of the candidates (the instance types the plan lists), sorted. */
export function offeredInstanceTypes(candidates: readonly Candidate[]): string[] {
  return [...new Set(candidates.map((candidate) => candidate.instanceType.name))].sort();
}

/** The GPUs of one instance type on one cluster, and how many are free now. */
export interface InstanceCapacity {
  clusterId: string;
  instanceType: InstanceTypeInfo;
  instances: number;
  gpus: number;
  freeGpus: number;
  /** The most GPUs free on one instance: a deployment takes its GPUs from one instance. */
  maxFreeGpusPerInstance: number;
}

/** The candidates' GPUs, per cluster and instance type (by cluster, then type name). */
export function capacityOf(candidates: readonly Candidate[]): InstanceCapacity[] {
  const groups = new Map<string, InstanceCapacity>();
  for (const candidate of candidates) {
    const key = `${candidate.clusterId}\u0000${candidate.instanceType.name}`;
    const group = groups.get(key) ?? { clusterId: candidate.clusterId, instanceType: candidate.instanceType, instances: 0, gpus: 0, freeGpus: 0, maxFreeGpusPerInstance: 0 };
    const free = Math.max(0, candidate.freeGpus);
    group.instances += 1;
    group.gpus += candidate.instanceType.gpuCount;
    group.freeGpus += free;
    group.maxFreeGpusPerInstance = Math.max(group.maxFreeGpusPerInstance, free);
    groups.set(key, group);
  }
  return [...groups.values()].sort((a, b) => a.clusterId.localeCompare(b.clusterId) || a.instanceType.name.localeCompare(b.instanceType.name));
}
