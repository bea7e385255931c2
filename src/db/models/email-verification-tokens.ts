import { SingleUseTokenRow } from './single-use-tokens.ts';

/** `email_verification_tokens`: single-use verification links, stored as the token's hash with the address they prove. */
export class EmailVerificationTokenRow extends SingleUseTokenRow {
  static override tableName = 'email_verification_tokens';
  /** The address the link proves (lower-cased); it proves nothing once the account's email changed. */
  declare email: string;
}
