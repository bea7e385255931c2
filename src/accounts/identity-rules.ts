/** What a user gives about themselves (registration, an invitation, an SSO provider's claims). */
export interface ProfileFields {
  name?: string | null;
  first_name?: string | null;
  last_name?: string | null;
  country?: string | null;
  contact_number?: string | null;
}

/** The profile columns of a new user. */
export interface NewUserProfile {
  name: string;
  first_name: string | null;
  last_name: string | null;
  country: string | null;
  contact_number: string | null;
}

/** `name`, else first and last name, else the part of the email before `@`. */
export function displayName(input: { name?: string | null; first_name?: string | null; last_name?: string | null }, email: string): string {
  const given = input.name?.trim();
  if (given) return given;
  const joined = [input.first_name, input.last_name].map((part) => part?.trim()).filter(Boolean).join(' ');
  return joined || email.split('@')[0] || email;
}

/** A new user's profile: the display name, and every other field trimmed (blank is none). */
export function newUserProfile(input: ProfileFields, email: string): NewUserProfile {
  return {
    name: displayName(input, email),
    first_name: input.first_name?.trim() || null,
    last_name: input.last_name?.trim() || null,
    country: input.country?.trim() || null,
    contact_number: input.contact_number?.trim() || null,
  };
}
