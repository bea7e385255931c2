import { describe, expect, it } from 'vitest';
import { capacityOf, planPlacement, selectPlacement, type Candidate } from '../../src/deployments/instance-selection.ts';

const t4 = { name: 'g4dn.xlarge', gpuType: 'T4', gpuCount: 1, gpuMemoryGb: 16, pricePerSecond: 0.526 / 3600 };
const a10g = { name: 'g5.xlarge', gpuType: 'A10G', gpuCount: 1, gpuMemoryGb: 24, pricePerSecond: 1.006 / 3600 };
const a10g4 = { name: 'g5.12xlarge', gpuType: 'A10G', gpuCount: 4, gpuMemoryGb: 24, pricePerSecond: 5.672 / 3600 };
const h100 = { name: 'p5.48xlarge', gpuType: 'H100', gpuCount: 8, gpuMemoryGb: 80, pricePerSecond: 55.04 / 3600 };

const candidate = (instanceId: string, instanceType: Candidate['instanceType'], freeGpus = instanceType.gpuCount, clusterId = 'east'): Candidate => ({
  instanceId,
  clusterId,
  instanceType,
  freeGpus,
});

describe('the placement plan', () => {
  it('makes the same selection as the provisioner, whatever the candidates', () => {
    const sets: Candidate[][] = [
      [candidate('h', h100), candidate('a', a10g), candidate('t', t4)],
      [candidate('a', a10g, 0), candidate('big', a10g4, 1)],
      [candidate('a', a10g, 0)],
      [candidate('t', t4)],
      [],
    ];
    for (const candidates of sets) {
      for (const required of [3.2, 18.8, 40, 170, 900]) {
        expect(planPlacement(candidates, required).selection).toEqual(selectPlacement(candidates, required));
      }
    }
  });

  it('lists every instance type that holds the model, cheapest first, with its hourly price and the GPUs it takes', () => {
    const { choices } = planPlacement([candidate('h', h100), candidate('a', a10g), candidate('t', t4), candidate('big', a10g4)], 40);
    expect(choices.map((c) => [c.instanceType.name, c.gpuCount])).toEqual([
      ['g5.12xlarge', 2],
      ['p5.48xlarge', 1],
    ]);
    expect(choices[0]?.hourlyPrice).toBeCloseTo(5.672 / 2, 9);
    expect(choices[1]?.hourlyPrice).toBeCloseTo(55.04 / 8, 9);
  });

  it('includes the selected choice, under the instance the selection took', () => {
    const plan = planPlacement([candidate('a2', a10g, 1), candidate('a1', a10g, 1), candidate('h', h100)], 18.8);
    expect(plan.selection).toMatchObject({ ok: true, placement: { instanceId: 'a1' } });
    expect(plan.choices[0]).toMatchObject({ instanceId: 'a1', instances: 2, freeInstances: 2 });
  });

  it('keeps full instance types as choices not free now, after the free ones of the same price', () => {
    const { selection, choices } = planPlacement(
      [candidate('a-full', a10g, 0, 'west'), candidate('a-free', a10g, 1, 'east'), candidate('h', h100, 0)],
      18.8,
    );
    expect(selection).toMatchObject({ ok: true, placement: { instanceId: 'a-free' } });
    expect(choices.map((c) => [c.clusterId, c.instanceType.name, c.freeInstances])).toEqual([
      ['east', 'g5.xlarge', 1],
      ['west', 'g5.xlarge', 0],
      ['east', 'p5.48xlarge', 0],
    ]);
  });

  it('groups the instances of a type on a cluster, the instance the selection prefers first', () => {
    const { choices } = planPlacement([candidate('big-1', a10g4, 1), candidate('big-2', a10g4, 3), candidate('big-3', a10g4, 0)], 18.8);
    expect(choices).toHaveLength(1);
    expect(choices[0]).toMatchObject({ instanceId: 'big-2', instances: 3, freeInstances: 2 });
  });

  it('lists the choices the capacity failure is about, none free', () => {
    const plan = planPlacement([candidate('a', a10g, 0), candidate('t', t4)], 18.8);
    expect(plan.selection).toMatchObject({ ok: false, stage: 'capacity' });
    expect(plan.choices).toMatchObject([{ instanceType: { name: 'g5.xlarge' }, freeInstances: 0 }]);
  });

  it('has no choice when no instance type holds the model', () => {
    const plan = planPlacement([candidate('a', a10g), candidate('t', t4)], 170);
    expect(plan.selection).toMatchObject({ ok: false, stage: 'instance_selection' });
    expect(plan.choices).toEqual([]);
  });
});

describe('capacity', () => {
  it('sums the GPUs and free GPUs of each instance type per cluster, with the most free on one instance', () => {
    const capacity = capacityOf([
      candidate('big-1', a10g4, 1),
      candidate('big-2', a10g4, 3),
      candidate('h', h100, 8, 'west'),
      candidate('a', a10g, 0),
    ]);
    expect(capacity.map((c) => [c.clusterId, c.instanceType.name, c.instances, c.gpus, c.freeGpus, c.maxFreeGpusPerInstance])).toEqual([
      ['east', 'g5.12xlarge', 2, 8, 4, 3],
      ['east', 'g5.xlarge', 1, 1, 0, 0],
      ['west', 'p5.48xlarge', 1, 8, 8, 8],
    ]);
  });

  it('is empty with no instances', () => {
    expect(capacityOf([])).toEqual([]);
  });
});
