import type { OutgoingEmail } from '../adapters/mailer.ts';

const escape = (value: string) =>
  value.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c] ?? c);

function withLink(subject: string, lines: string[], link: string, action: string): Omit<OutgoingEmail, 'to'> {
  const text = [...lines, '', `${action}: ${link}`, ''].join('\n');
  const html = `${lines.map((line) => `<p>${escape(line)}</p>`).join('\n')}\n<p><a href="${escape(link)}">${escape(action)}</a></p>\n`;
  return { subject, text, html };
}

export function passwordResetEmail(input: { name: string; link: string }): Omit<OutgoingEmail, 'to'> {
  return withLink(
    'Reset your password',
    [`Hello ${input.name},`, 'Someone asked to reset the password of your account. The link works once, for one hour.', 'If it was not you, ignore this email: your password stays as it is.'],
    input.link,
    'Choose a new password',
  );
}

export function emailVerificationEmail(input: { name: string; link: string; lifetimeHours: number }): Omit<OutgoingEmail, 'to'> {
  return withLink(
    'Confirm your email address',
    [
      `Hello ${input.name},`,
      `Confirm that this address is yours. The link works once, for ${input.lifetimeHours} hours.`,
      'If you did not create an account, ignore this email: the address stays unconfirmed.',
    ],
    input.link,
    'Confirm my email address',
  );
}

/** The most characters of a name someone else wrote (an organization's, an inviter's) an email quotes. */
export const QUOTED_NAME_MAX = 40;

/**
 * A name someone else wrote, as an email quotes it: only letters, marks, digits, spaces and
 * `-_,'&()` are kept (no `.`, `:`, `/`, `<`, `@`: no link, host, address or markup), runs of anything else
 * become one space, and it is cut to QUOTED_NAME_MAX characters with an ellipsis, inside quotes.
 */
export function quotedName(name: string): string {
  const kept = name
    .replace(/[^\p{L}\p{M}\p{N} \-_,'&()]+/gu, ' ')
    .replace(/\s+/g, ' ')
    .trim();
  const chars = [...kept];
  return `"${chars.length > QUOTED_NAME_MAX ? `${chars.slice(0, QUOTED_NAME_MAX - 1).join('').trimEnd()}…` : kept}"`;
}

/** An invitation: the organization's and the inviter's names are quoted (quotedName), the HTML part escaped as every part is. */
export function invitationEmail(input: { organization: string; inviter: string; role: string; link: string; expiresAt: Date }): Omit<OutgoingEmail, 'to'> {
  const organization = quotedName(input.organization);
  const inviter = quotedName(input.inviter);
  return withLink(
    `Invitation to join ${organization}`,
    [
      `${inviter} invited you to join the organization ${organization} as ${input.role === 'admin' ? 'an' : 'a'} ${input.role}.`,
      `The invitation is valid until ${input.expiresAt.toUTCString()}.`,
    ],
    input.link,
    'Accept the invitation',
  );
}

export function spendingAlertEmail(input: { name: string; organization: string; percent: number; spent: string; limit: string; periodEnd: Date; link: string }): Omit<OutgoingEmail, 'to'> {
  const reached = input.percent >= 100;
  return withLink(
    reached ? `${input.organization} has reached its monthly spending limit` : `${input.organization} has used ${input.percent} % of its monthly spending limit`,
    [
      `Hello ${input.name},`,
      `${input.organization} has spent an estimated $${input.spent} of its monthly spending limit of $${input.limit} in the period ending ${input.periodEnd.toUTCString()}.`,
      reached
        ? 'New deployments are refused until the limit is raised or the period ends; running deployments keep running and keep accruing charges.'
        : 'New deployments are refused once the limit is reached; running deployments keep running.',
    ],
    input.link,
    'Review billing',
  );
}
