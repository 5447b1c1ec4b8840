// Monthly due dates: a TypeScript job with two dependencies from npm,
// date-fns (month arithmetic that ends a short month at its last day) and
// zod (the input's shape checked, with a message that says what is wrong).
// `cohort build` installs them from package-lock.json.
//
// Input `{"start": "2026-01-31", "months": 4, "amount": 250}`; output
// `{"due": [{"n": 1, "date": "2026-01-31", "weekday": "Saturday",
// "amount": 250}, ...]}`. Every date is counted from the start, so after
// February 28th comes March 31st.

import { addMonths, format, isValid, parseISO } from "date-fns";
import { z } from "zod";
import { JobError, job } from "cohort-job";

/** The most months one answer lists. */
const MONTHS_MAX = 600;

const Request = z.object({
  start: z.string(),
  months: z.number().int().min(1).max(MONTHS_MAX).default(12),
  amount: z.number().default(0),
});

interface Due {
  n: number;
  date: string;
  weekday: string;
  amount: number;
}

export const run = job.json((input: unknown): { due: Due[] } => {
  const parsed = Request.safeParse(input);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new JobError("bad_input", `${issue.path.join(".") || "input"}: ${issue.message}`);
  }
  const { start, months, amount } = parsed.data;
  const first = parseISO(start);
  if (!isValid(first)) {
    throw new JobError("bad_input", `start: ${JSON.stringify(start)} is not a date`);
  }
  const due: Due[] = [];
  for (let n = 0; n < months; n++) {
    const date = addMonths(first, n);
    due.push({
      n: n + 1,
      date: format(date, "yyyy-MM-dd"),
      weekday: format(date, "EEEE"),
      amount,
    });
  }
  return { due };
});
