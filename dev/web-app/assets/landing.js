// The script of the local stand-in for the web app (dev/web-app/web-app.ts), run in the
// browser as it is: no build step, no framework. Each page (`<body data-page>`) completes its action
// through the service's public API on this origin, as a web app would: cookies for the session,
// the readable CSRF cookie echoed in `X-CSRF-Token` on state-changing calls. Text from the API is
// always set as text, never as HTML.
/* global document, location, fetch, FormData, URLSearchParams */

const main = document.getElementById('app');

/** The value of cookie `name`, or undefined. */
function cookie(name) {
  for (const part of document.cookie.split(';')) {
    const [key, ...value] = part.trim().split('=');
    if (key === name) return decodeURIComponent(value.join('='));
  }
  return undefined;
}

/** One call of the public API: `{ ok, status, data }`, with the JSON answer (a Problem on errors) as `data`. */
async function api(method, path, body) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  // With Secure cookies (SESSION_COOKIE_SECURE) the CSRF cookie carries the __Host- prefix.
  const csrf = cookie('csrf_token') ?? cookie('__Host-csrf_token');
  if (method !== 'GET' && csrf) headers['x-csrf-token'] = csrf;
  const response = await fetch(path, { method, headers, credentials: 'same-origin', body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await response.json().catch(() => null);
  return { ok: response.ok, status: response.status, data };
}

/** A Problem answer in one line: its code, detail and each invalid field. */
function problem(data) {
  if (!data || typeof data !== 'object') return 'the service did not answer as expected.';
  const errors = Array.isArray(data.errors) ? data.errors.map((error) => ` ${error.location}: ${error.message}.`).join('') : '';
  return `${data.code ?? 'ERROR'}: ${data.detail ?? data.title ?? ''}${errors}`;
}

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  node.append(...children);
  return node;
}

const show = (...nodes) => main.replaceChildren(...nodes);
const status = (text) => el('p', { role: 'status' }, text);
const alert = (text) => el('p', { role: 'alert' }, text);

/**
 * A form whose submission calls `submit(values)`: it answers an error text to show under the form
 * (the form stays), or nothing once it has shown what comes next.
 */
function form(heading, fields, label, submit) {
  const error = el('p', { role: 'alert', hidden: '' });
  const button = el('button', { type: 'submit' }, label);
  const inputs = fields.map(({ label: text, ...attributes }) => el('label', {}, text, ' ', el('input', attributes)));
  const node = el('form', {}, ...(heading ? [el('h2', {}, heading)] : []), ...inputs, button, error);
  node.addEventListener('submit', async (event) => {
    event.preventDefault();
    button.disabled = true;
    error.hidden = true;
    try {
      const message = await submit(Object.fromEntries(new FormData(node)));
      if (message) {
        error.textContent = message;
        error.hidden = false;
      }
    } catch (failure) {
      error.textContent = `The request failed: ${failure}`;
      error.hidden = false;
    } finally {
      button.disabled = false;
    }
  });
  return node;
}

/** The sign-in form (`POST /v1/user/signin`); `then(session)` once signed in. */
function signInForm(email, then) {
  return form(
    'Sign in',
    [
      { label: 'Email', name: 'email', type: 'email', value: email, autocomplete: 'username', required: '' },
      { label: 'Password', name: 'password', type: 'password', autocomplete: 'current-password', required: '' },
    ],
    'Sign in',
    async (values) => {
      const { ok, data } = await api('POST', '/v1/user/signin', { email: values.email, password: values.password });
      if (!ok) return problem(data);
      await then(data);
    },
  );
}

const token = () => new URLSearchParams(location.search).get('token');

/** /verify-email?token=…: the token alone confirms the address (no session needed), once. */
async function verifyEmail() {
  const value = token();
  if (!value) return show(alert('This link has no token: open the link of the verification email as it is.'));
  show(status('Confirming your email address…'));
  const { ok, data } = await api('POST', '/v1/user/email-verification/confirm', { token: value });
  if (ok) return show(status(`Your email address ${data.email} is confirmed.`));
  show(alert(`The address could not be confirmed: ${problem(data)}`));
}

/** /reset-password?token=…: a new-password form; every session of the account ends when it is set. */
async function resetPassword() {
  const value = token();
  if (!value) return show(alert('This link has no token: open the link of the reset email as it is.'));
  show(
    form(
      '',
      [{ label: 'New password', name: 'password', type: 'password', autocomplete: 'new-password', required: '' }],
      'Set the new password',
      async (values) => {
        const { ok, data } = await api('POST', '/v1/auth/password-reset/confirm', { token: value, password: values.password });
        if (!ok) return problem(data);
        show(status('Your password is changed. Every session of your account has ended: sign in with the new password.'));
      },
    ),
  );
}

/** /invitations/{token}: the invitation, then accept it signed in, or sign in, or create an account and join. */
async function invitation() {
  const value = decodeURIComponent(location.pathname.split('/').pop());
  const path = `/v1/invitations/by-token/${encodeURIComponent(value)}`;
  const preview = await api('GET', path);
  if (!preview.ok) return show(alert(`This invitation cannot be shown: ${problem(preview.data)}`));
  const { organization_name: organization, invitee_email: invitee, role, status: state, expires_at: expires } = preview.data;
  const summary = el('p', {}, `${organization} invited ${invitee} to join as ${role}. Status: ${state}; valid until ${new Date(expires).toUTCString()}.`);
  if (state !== 'pending') return show(summary, alert(`This invitation is ${state}: there is nothing to accept.`));
  const joined = () => show(summary, status(`You joined ${organization} as ${role}.`));

  const accept = (session) =>
    show(
      summary,
      el('p', {}, `Signed in as ${session.user.email}.`),
      form('', [], 'Accept the invitation', async () => {
        const { ok, data } = await api('POST', `${path}/accept`);
        if (!ok) return problem(data);
        joined();
      }),
    );
  const session = await api('GET', '/v1/auth/session');
  if (session.ok) return accept(session.data);
  show(
    summary,
    signInForm(invitee, accept),
    form(
      `No account for ${invitee} yet? Create it`,
      [
        { label: 'Password', name: 'password', type: 'password', autocomplete: 'new-password', required: '' },
        { label: 'First name', name: 'first_name', autocomplete: 'given-name' },
        { label: 'Last name', name: 'last_name', autocomplete: 'family-name' },
      ],
      'Create my account and join',
      async (values) => {
        const body = { token: value, password: values.password };
        if (values.first_name) body.first_name = values.first_name;
        if (values.last_name) body.last_name = values.last_name;
        const { ok, data } = await api('POST', '/v1/invitations/register', body);
        if (!ok) return problem(data);
        joined();
      },
    ),
  );
}

/**
 * /settings/billing: where Checkout returns, whether the card was saved or the checkout cancelled
 * (one return address for both), so the page says which from the cards saved; then the billing
 * account as the API has it (the subscription follows the processor's webhook a moment later).
 */
async function billing() {
  const session = await api('GET', '/v1/auth/session');
  if (!session.ok) return show(el('p', {}, 'Sign in to see the billing of your organization.'), signInForm('', billing));
  const [cards, account] = await Promise.all([api('GET', '/v1/billing/payment-methods'), api('GET', '/v1/billing/account')]);
  const { user } = session.data;
  const parts = [el('p', {}, `Signed in as ${user.email}, ${user.role.name} of ${user.organization}.`)];
  if (cards.ok) {
    const card = cards.data.find((saved) => saved.is_default) ?? cards.data[0];
    parts.push(
      card
        ? status(`Your card is saved: ${card.brand} •••• ${card.last4}, expires ${card.exp_month}/${card.exp_year}${card.is_default ? ', the default' : ''}.`)
        : status('No card is saved: the checkout was cancelled or has not been completed.'),
    );
  } else if (cards.status === 403) {
    parts.push(el('p', {}, 'Saved cards are shown to admins only.'));
  } else {
    parts.push(alert(`The saved cards could not be read: ${problem(cards.data)}`));
  }
  if (account.ok) {
    const a = account.data;
    const rows = [
      ['Status', a.status],
      ['Billing mode', a.billing_mode],
      ['Currency', a.currency],
      ['Subscription', a.subscription_status ?? 'none'],
      ['Collection method', a.collection_method ?? 'none'],
      ['Current period', a.current_period_start ? `${a.current_period_start} to ${a.current_period_end}` : 'none'],
      ['Active deployments allowed', String(a.max_active_resources)],
    ];
    parts.push(el('h2', {}, 'Billing account'), el('ul', {}, ...rows.map(([name, text]) => el('li', {}, `${name}: ${text}`))));
  } else {
    parts.push(alert(`The billing account could not be read: ${problem(account.data)}`));
  }
  const refresh = el('button', { type: 'button' }, 'Refresh');
  refresh.addEventListener('click', () => void billing());
  show(...parts, refresh);
}

const pages = { 'verify-email': verifyEmail, 'reset-password': resetPassword, invitation, billing };
pages[document.body.dataset.page]?.().catch((failure) => show(alert(`Something went wrong: ${failure}`)));
