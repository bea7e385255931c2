import { BaseModel } from '../base-model.ts';

/** The columns every single-use token table shares (a token is stored only as its hash). Not a table itself. */
export class SingleUseTokenRow extends BaseModel {
  declare id: number;
  declare user_id: number;
  declare token_hash: string;
  declare expires_at: Date;
  declare used_at: Date | null;
  declare created_at: Date;
}
