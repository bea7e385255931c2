import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { EmailOutbox } from '../email/email.outbox.ts';
import { spendingAlertEmail } from '../email/templates.ts';
import type { JobDefinition } from '../jobs/queue.ts';
import { adminsOf, findOrganization } from '../organizations/organizations.repository.ts';
import { findBillingAccount, organizationsWithSpendingLimit, recordSpendingAlerts } from './billing.repository.ts';
import { periodSpentCents } from './deployment-guard.ts';
import { formatCents, toCents } from '../metering/money.ts';
import { usageSummary } from '../metering/usage-summary.ts';

export const SPENDING_ALERTS_QUEUE = 'check-spending-alerts';

/** The shares of the monthly spending limit at which the organization's admins are told, in percent. */
export const ALERT_THRESHOLDS = [50, 80, 100] as const;

/**
 * Spending alerts: the admins (admin and super_admin) of an organization with a monthly spending
 * limit are emailed when the current period's estimated amount (the usage summary's, the amount
 * create's guard compares with the limit) reaches 50 %, 80 % and 100 % of it, each once per period.
 * A threshold is recorded in `spending_alerts` in the transaction that queues its emails, so two
 * workers checking at once send it once; thresholds passed together send one email, for the highest.
 */
export class SpendingAlerts {
  readonly #db: Knex;
  readonly #outbox: EmailOutbox;
  readonly #billingPageUrl: string;

  constructor(deps: { db: Knex; outbox: EmailOutbox; billingPageUrl: string }) {
    this.#db = deps.db;
    this.#outbox = deps.outbox;
    this.#billingPageUrl = deps.billingPageUrl;
  }

  /** Checks every organization with a limit; resolves with the alerts sent. */
  async checkAll(log: Logger): Promise<number> {
    let sent = 0;
    for (const organizationId of await organizationsWithSpendingLimit(this.#db)) {
      sent += await this.check(organizationId).catch((error: unknown) => {
        log.error({ err: error, organization_id: organizationId }, 'the spending alerts of an organization could not be checked');
        return 0;
      });
    }
    return sent;
  }

  /** Checks one organization: 1 when an alert was sent, 0 otherwise. */
  async check(organizationId: number): Promise<number> {
    return this.#db.transaction(async (trx) => {
      const account = await findBillingAccount(trx, organizationId);
      if (!account?.monthly_spending_limit) return 0;
      const limitCents = toCents(account.monthly_spending_limit);
      if (limitCents <= 0n) return 0;
      const summary = await usageSummary(trx, organizationId);
      const spentCents = periodSpentCents(summary);
      const reached = ALERT_THRESHOLDS.filter((percent) => spentCents * 100n >= limitCents * BigInt(percent));
      if (!reached.length) return 0;
      const recorded = await recordSpendingAlerts(trx, {
        organizationId,
        periodStart: summary.period_start,
        thresholds: reached,
        spent: formatCents(spentCents),
        limit: account.monthly_spending_limit,
      });
      if (!recorded.length) return 0;
      const percent = Math.max(...recorded);
      const organization = await findOrganization(trx, organizationId);
      for (const admin of await adminsOf(trx, organizationId)) {
        await this.#outbox.enqueue(trx, {
          to: admin.email,
          template: 'spending_alert',
          ...spendingAlertEmail({
            name: admin.name,
            organization: organization?.name ?? 'Your organization',
            percent,
            spent: formatCents(spentCents),
            limit: formatCents(limitCents),
            periodEnd: new Date(summary.period_end),
            link: this.#billingPageUrl,
          }),
        });
      }
      return 1;
    });
  }
}

/** Every minute, once across the workers. */
export function spendingAlertsJob(alerts: SpendingAlerts): JobDefinition<object> {
  return {
    queue: SPENDING_ALERTS_QUEUE,
    schedule: '* * * * *',
    retryLimit: 0,
    async handle(_data, { log }) {
      const sent = await alerts.checkAll(log);
      if (sent) log.info({ alerts: sent }, 'spending alerts sent');
    },
  };
}
