import { afterEach } from 'vitest';
import { settleContractChecks } from './contract-checks.ts';

// A streamed answer's first event is checked while the test reads the stream; a test ends only
// once those checks have finished, and fails if one found the event off the document.
afterEach(settleContractChecks);
