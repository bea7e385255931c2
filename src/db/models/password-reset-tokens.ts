import { SingleUseTokenRow } from './single-use-tokens.ts';

/** `password_reset_tokens`: single-use reset links, stored as the token's hash. */
export class PasswordResetTokenRow extends SingleUseTokenRow {
  static override tableName = 'password_reset_tokens';
}
