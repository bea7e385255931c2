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

export function invitationEmail(input: { organization: string; inviter: string; role: string; link: string; expiresAt: Date }): Omit<OutgoingEmail, 'to'> {
  return withLink(
    `${input.inviter} invited you to ${input.organization}`,
    [
      `${input.inviter} invited you to join ${input.organization} as ${input.role === 'admin' ? 'an' : 'a'} ${input.role}.`,
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
