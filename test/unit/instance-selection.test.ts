import { describe, expect, it } from 'vitest';
import { replicasThatFit, requiredGpuMemoryGb, selectPlacement, type Candidate } from '../../src/deployments/instance-selection.ts';

const t4 = { name: 'g4dn.xlarge', gpuType: 'T4', gpuCount: 1, gpuMemoryGb: 16, pricePerSecond: 0.526 / 3600 };
const a10g = { name: 'g5.xlarge', gpuType: 'A10G', gpuCount: 1, gpuMemoryGb: 24, pricePerSecond: 1.006 / 3600 };
const a10g4 = { name: 'g5.12xlarge', gpuType: 'A10G', gpuCount: 4, gpuMemoryGb: 24, pricePerSecond: 5.672 / 3600 };
const h100 = { name: 'p5.48xlarge', gpuType: 'H100', gpuCount: 8, gpuMemoryGb: 80, pricePerSecond: 55.04 / 3600 };

const candidate = (instanceId: string, instanceType: Candidate['instanceType'], freeGpus = instanceType.gpuCount): Candidate => ({
  instanceId,
  clusterId: 'cluster',
  instanceType,
  freeGpus,
});

describe('required GPU memory', () => {
  it.each([
    [7, 'none', 18.8],
    [7, 'Int8', 10.4],
    [7, 'Int4', 6.2],
    [70, 'none', 170],
    [0.5, 'none', 3.2],
  ])('is %sB × bytes(%s) × 1.2 + 2 GB = %s GB', (size, quantization, expected) => {
    expect(requiredGpuMemoryGb(size, quantization)).toBe(expected);
  });
});

describe('instance selection', () => {
  it('picks the cheapest instance type that holds the model', () => {
    const selection = selectPlacement([candidate('h', h100), candidate('a', a10g), candidate('t', t4)], 18.8);
    expect(selection).toMatchObject({ ok: true, placement: { instanceId: 'a', gpuCount: 1 } });
    expect(selection.ok && selection.placement.reason).toBe(
      'g5.xlarge is the cheapest instance type with free capacity and at least 18.8 GB of GPU memory (1 x A10G, 24 GB) at $0.000279/s.',
    );
  });

  it('prices a share of a multi-GPU instance by the GPUs it takes', () => {
    const selection = selectPlacement([candidate('big', a10g4), candidate('h', h100)], 40);
    expect(selection).toMatchObject({ ok: true, placement: { instanceId: 'big', gpuCount: 2 } });
    expect(selection.ok && selection.placement.pricePerSecond).toBeCloseTo((5.672 / 3600) / 2, 9);
  });

  it('skips instances without enough free GPUs', () => {
    expect(selectPlacement([candidate('a', a10g, 0), candidate('big', a10g4, 1)], 18.8)).toMatchObject({
      ok: true,
      placement: { instanceId: 'big', gpuCount: 1 },
    });
  });

  it('fails at capacity when instances fit but none is free', () => {
    expect(selectPlacement([candidate('a', a10g, 0)], 18.8)).toMatchObject({ ok: false, stage: 'capacity' });
  });

  it('fails at instance selection when no instance type can hold the model', () => {
    expect(selectPlacement([candidate('a', a10g), candidate('t', t4)], 170)).toMatchObject({ ok: false, stage: 'instance_selection' });
  });

  it('is deterministic on ties', () => {
    const first = selectPlacement([candidate('b', a10g), candidate('a', a10g)], 10);
    const second = selectPlacement([candidate('a', a10g), candidate('b', a10g)], 10);
    expect(first).toEqual(second);
  });
});

describe('instance selection with an instance type asked for', () => {
  it('places only on that type, though another is cheaper', () => {
    const selection = selectPlacement([candidate('a', a10g), candidate('h', h100)], 18.8, 'p5.48xlarge');
    expect(selection).toMatchObject({ ok: true, placement: { instanceId: 'h', gpuCount: 1 } });
    expect(selection.ok && selection.placement.reason).toMatch(/^p5\.48xlarge is the instance type asked for, and has free capacity/);
  });

  it('fails at instance_selection when that type cannot hold the model, and at capacity when it is full', () => {
    expect(selectPlacement([candidate('t', t4), candidate('h', h100)], 18.8, 'g4dn.xlarge')).toMatchObject({ ok: false, stage: 'instance_selection', reason: expect.stringContaining('g4dn.xlarge') });
    expect(selectPlacement([candidate('a', a10g), candidate('h', h100, 0)], 18.8, 'p5.48xlarge')).toMatchObject({ ok: false, stage: 'capacity', reason: expect.stringContaining('p5.48xlarge') });
  });
});

describe('replicas that fit', () => {
  it('counts the replicas the free GPUs of the type on the cluster hold, each on one instance', () => {
    const candidates = [candidate('x', a10g4, 3), candidate('y', a10g4, 1), candidate('z', h100), { ...candidate('w', a10g4), clusterId: 'other' }];
    expect(replicasThatFit(candidates, { clusterId: 'cluster', instanceType: 'g5.12xlarge', gpuCount: 2 })).toBe(1);
    expect(replicasThatFit(candidates, { clusterId: 'cluster', instanceType: 'g5.12xlarge', gpuCount: 1 })).toBe(4);
  });
});
