import type { components } from '../../generated/api.d.ts';
import type { DeploymentGuardVerdict } from '../billing/deployment-guard.ts';
import type { GpuServicePrice, PlacementOption, ReplicaCost } from './deployments.repository.ts';
import type { InstanceCapacity, Placement, PlacementChoice, PlacementPlan } from './instance-selection.ts';
import type { ResolvedLaunch } from './launch-spec.ts';

export type DeploymentPlan = components['schemas']['DeploymentPlan'];
type PlanOption = components['schemas']['DeploymentPlanOption'];

export interface PlanFacts {
  launch: ResolvedLaunch & { modelName: string; requiredGb: number };
  placement: PlacementPlan;
  /** The billed price of each choice (by its instance and GPU count). */
  prices: readonly GpuServicePrice[];
  capacity: readonly InstanceCapacity[];
  /** The placement candidates' rows: where each cluster's provider and region come from. */
  clusters: ReadonlyArray<Pick<PlacementOption, 'cluster_id' | 'provider' | 'region'>>;
  guards: readonly DeploymentGuardVerdict[];
  refusal: Extract<DeploymentGuardVerdict, { verdict: 'refused' }> | undefined;
  scaling: {
    minReplicas: number;
    maxReplicas: number;
    /** The cost at `minReplicas` and at `maxReplicas` on the chosen option; null when none is chosen. */
    costs: readonly ReplicaCost[] | null;
    /** How many replicas fit on the free GPUs of the chosen option's instance type on its cluster now. */
    fitting: number;
  };
}

/** The plan as the API shows it (`DeploymentPlan`), from what create and provisioning decided. */
export function toDeploymentPlan(facts: PlanFacts): DeploymentPlan {
  const { launch, placement, refusal } = facts;
  const where = new Map(facts.clusters.map((row) => [row.cluster_id, { provider: row.provider, region: row.region }]));
  /** A cluster's id with where it runs. */
  const located = (clusterId: string) => ({ cluster_id: clusterId, provider: where.get(clusterId)?.provider ?? '', region: where.get(clusterId)?.region ?? '' });
  const priceOf = (choice: PlacementChoice) => {
    const price = facts.prices.find((p) => p.instance_id === choice.instanceId && p.gpu_count === choice.gpuCount);
    if (!price) throw new Error(`no GPU service for ${choice.gpuCount} GPUs of instance ${choice.instanceId}`);
    return price;
  };
  const option = (choice: PlacementChoice): PlanOption => {
    const price = priceOf(choice);
    return {
      ...located(choice.clusterId),
      instance_type: choice.instanceType.name,
      gpu_type: choice.instanceType.gpuType,
      gpu_count: choice.gpuCount,
      gpu_memory_gb: choice.gpuCount * choice.instanceType.gpuMemoryGb,
      available_now: choice.freeInstances > 0,
      service_key: price.service_key,
      hourly_price: price.hourly_amount,
      currency: price.currency,
    };
  };

  const { selection } = placement;
  const chosen = selection.ok ? placement.choices.find((choice) => choice.instanceId === selection.placement.instanceId) : undefined;
  const chosenPrice = chosen && priceOf(chosen);
  return {
    launch: {
      model_name: launch.modelName,
      model_engine: launch.modelEngine,
      model_format: launch.modelFormat,
      model_size_in_billions: launch.modelSizeInBillions,
      quantization: launch.quantization,
      required_gpu_memory_gb: launch.requiredGb,
    },
    placement: {
      selected_instance_type: selection.ok ? selection.placement.instanceType.name : null,
      selection_reason: selection.ok ? selection.placement.reason : null,
      chosen: chosen ? option(chosen) : null,
      alternatives: placement.choices.filter((choice) => choice !== chosen).map(option),
      failure_stage: selection.ok ? null : selection.stage,
      failure_reason: selection.ok ? null : selection.reason,
    },
    estimated_cost: chosenPrice
      ? {
          service_key: chosenPrice.service_key,
          unit_amount_decimal: chosenPrice.unit_amount_decimal,
          hourly_amount: chosenPrice.hourly_amount,
          thirty_day_amount: chosenPrice.thirty_day_amount,
          currency: chosenPrice.currency,
        }
      : null,
    capacity: facts.capacity.map((group) => {
      // Availability for this plan's model, never the exact free counts: those would show other
      // tenants' activity. The deprecated counts say all of the type's GPUs, or none.
      const availableNow = placement.choices.some(
        (choice) => choice.clusterId === group.clusterId && choice.instanceType.name === group.instanceType.name && choice.freeInstances > 0,
      );
      return {
        ...located(group.clusterId),
        instance_type: group.instanceType.name,
        gpu_type: group.instanceType.gpuType,
        gpu_memory_per_gpu_gb: group.instanceType.gpuMemoryGb,
        instances: group.instances,
        gpus: group.gpus,
        available_now: availableNow,
        free_gpus: availableNow ? group.gpus : 0,
        max_free_gpus_per_instance: availableNow ? Math.ceil(group.gpus / Math.max(1, group.instances)) : 0,
      };
    }),
    scaling: scalingOf(facts.scaling, selection.ok ? selection.placement : undefined),
    guards: facts.guards.map((verdict) => ({ ...verdict })),
    would_be_refused: refusal ? { status: 409, code: refusal.code, detail: refusal.detail } : null,
  };
}

/** The plan's `scaling`: the costs at min and max, and whether max fits, in a sentence that shows no free GPU count. */
function scalingOf(scaling: PlanFacts['scaling'], chosen: Placement | undefined): DeploymentPlan['scaling'] {
  const [atMin, atMax] = scaling.costs ?? [];
  const fit = chosen !== undefined && scaling.fitting >= scaling.maxReplicas;
  const replicas = chosen && `${scaling.maxReplicas} ${scaling.maxReplicas === 1 ? 'replica' : 'replicas'} of ${chosen.gpuCount} x ${chosen.instanceType.gpuType}`;
  const gpus = chosen && `The free GPUs of ${chosen.instanceType.name} on the chosen cluster`;
  return {
    min_replicas: scaling.minReplicas,
    max_replicas: scaling.maxReplicas,
    at_min: atMin ?? null,
    at_max: atMax ?? null,
    max_replicas_fit: fit,
    max_replicas_fit_reason: !chosen
      ? 'No instance type can take the deployment now, so no replica fits.'
      : fit
        ? `${gpus} hold ${replicas} now.`
        : `${gpus} do not hold ${replicas} now: the autoscaler adds replicas as GPUs free up, and records each shortfall as a deployment.scaled event (reason capacity_shortfall).`,
  };
}
