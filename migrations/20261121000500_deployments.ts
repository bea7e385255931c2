import type { Knex } from 'knex';

/**
 * GPU infrastructure and deployments: clusters (each with a serving-engine supervisor and its
 * credential, sealed at rest), instance types with real public on-demand prices, instances, GPU
 * allocations and the deployments placed on them.
 */
const INSTANCE_TYPES: Array<[name: string, provider: string, gpuType: string, gpuCount: number, gpuMemoryGb: number, dollarsPerHour: number]> = [
  // AWS EC2 on-demand, us-east-1, Linux.
  ['g4dn.xlarge', 'aws', 'T4', 1, 16, 0.526],
  ['g4dn.12xlarge', 'aws', 'T4', 4, 16, 3.912],
  ['g5.xlarge', 'aws', 'A10G', 1, 24, 1.006],
  ['g5.2xlarge', 'aws', 'A10G', 1, 24, 1.212],
  ['g5.12xlarge', 'aws', 'A10G', 4, 24, 5.672],
  ['g5.48xlarge', 'aws', 'A10G', 8, 24, 16.288],
  ['g6.xlarge', 'aws', 'L4', 1, 24, 0.8048],
  ['g6.12xlarge', 'aws', 'L4', 4, 24, 4.6016],
  ['g6e.xlarge', 'aws', 'L40S', 1, 48, 1.861],
  ['g6e.12xlarge', 'aws', 'L40S', 4, 48, 10.493],
  ['p4d.24xlarge', 'aws', 'A100', 8, 40, 32.7726],
  ['p4de.24xlarge', 'aws', 'A100', 8, 80, 40.9657],
  ['p5.48xlarge', 'aws', 'H100', 8, 80, 55.04],
  // Google Cloud on-demand, us-central1.
  ['g2-standard-4', 'gcp', 'L4', 1, 24, 0.7068],
  ['a2-highgpu-1g', 'gcp', 'A100', 1, 40, 3.6731],
  ['a2-ultragpu-1g', 'gcp', 'A100', 1, 80, 5.0688],
  ['a3-highgpu-8g', 'gcp', 'H100', 8, 80, 88.2527],
];

export async function up(knex: Knex): Promise<void> {
  await knex.raw(`
    create table clusters (
      id uuid primary key default gen_random_uuid(),
      name text not null unique,
      provider text not null,
      region text not null,
      endpoint text not null,
      sealed_credential text,
      status text not null default 'active' check (status in ('active', 'disabled')),
      hosted boolean not null default false,
      last_synced_at timestamptz,
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now()
    );
    create trigger clusters_updated_at before update on clusters for each row execute function set_updated_at();

    create table instance_types (
      id uuid primary key default gen_random_uuid(),
      name text not null unique,
      provider text not null,
      gpu_type text not null,
      gpu_count integer not null check (gpu_count > 0),
      gpu_memory_gb integer not null check (gpu_memory_gb > 0),
      price_per_second numeric(14, 9) not null check (price_per_second >= 0),
      currency text not null default 'usd',
      created_at timestamptz not null default now()
    );

    create table instances (
      id uuid primary key default gen_random_uuid(),
      cluster_id uuid not null references clusters (id) on delete cascade,
      instance_type_id uuid not null references instance_types (id),
      engine_worker text not null,
      status text not null default 'available' check (status in ('available', 'unavailable')),
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      unique (cluster_id, engine_worker)
    );
    create trigger instances_updated_at before update on instances for each row execute function set_updated_at();

    create table deployments (
      id uuid primary key default gen_random_uuid(),
      user_id integer not null references users (id),
      organization_id integer not null references organizations (id),
      deployable_model_id uuid not null references deployable_models (id),
      model_name text not null,
      model_format text not null,
      model_size_in_billions numeric(8, 2) not null,
      quantization text not null,
      model_engine text not null,
      status text not null default 'requested'
        check (status in ('requested', 'provisioning', 'starting', 'running', 'failed', 'terminating', 'terminated')),
      cluster_id uuid references clusters (id),
      instance_id uuid references instances (id),
      gpu_allocation_id uuid,
      engine_model_uid text unique,
      selected_instance_type text,
      selection_reason text,
      failure_stage text check (failure_stage in ('instance_selection', 'capacity', 'instance_provisioning', 'model_launch', 'health_check')),
      failure_reason text,
      status_changed_at timestamptz not null default now(),
      created_at timestamptz not null default now(),
      updated_at timestamptz not null default now(),
      terminated_at timestamptz
    );
    create index deployments_by_user on deployments (user_id, created_at desc, id desc);
    create index deployments_active_by_organization on deployments (organization_id)
      where status in ('requested', 'provisioning', 'starting', 'running', 'terminating');
    create index deployments_in_progress on deployments (status, status_changed_at)
      where status in ('requested', 'provisioning', 'starting', 'running', 'terminating');
    create trigger deployments_updated_at before update on deployments for each row execute function set_updated_at();

    create table gpu_allocations (
      id uuid primary key default gen_random_uuid(),
      deployment_id uuid not null references deployments (id),
      instance_id uuid not null references instances (id),
      gpu_count integer not null check (gpu_count > 0),
      status text not null default 'active' check (status in ('active', 'released')),
      created_at timestamptz not null default now(),
      released_at timestamptz
    );
    -- One live allocation per deployment, whatever retries happen.
    create unique index gpu_allocations_one_active on gpu_allocations (deployment_id) where status = 'active';
    create index gpu_allocations_active_by_instance on gpu_allocations (instance_id) where status = 'active';
    alter table deployments add constraint deployments_gpu_allocation_fkey foreign key (gpu_allocation_id) references gpu_allocations (id);
  `);
  await knex('instance_types').insert(
    INSTANCE_TYPES.map(([name, provider, gpuType, gpuCount, gpuMemoryGb, dollarsPerHour]) => ({
      name,
      provider,
      gpu_type: gpuType,
      gpu_count: gpuCount,
      gpu_memory_gb: gpuMemoryGb,
      price_per_second: (dollarsPerHour / 3600).toFixed(9),
    })),
  );
}

export async function down(knex: Knex): Promise<void> {
  await knex.raw(`
    alter table deployments drop constraint deployments_gpu_allocation_fkey;
    drop table gpu_allocations, deployments, instances, instance_types, clusters;
  `);
}
