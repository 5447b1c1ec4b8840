"""A table of monthly due dates: a Python job with two dependencies from
PyPI, `python-dateutil` and `tabulate`, which `cohort build` installs and
pins in `cohort.lock`.

Input: JSON `{"start": "2026-01-31", "months": 4, "amount": 250}`; output:
the dates as a text table. A month without the start's day ends the month
(`relativedelta`: January 31st, then February 28th), and every date is
counted from the start, so March is the 31st again, not the 28th.
"""

from dateutil.parser import isoparse
from dateutil.relativedelta import relativedelta
from tabulate import tabulate

from cohort_job import JobError, job

#: The most months one table lists.
MONTHS_MAX = 600


@job(input="json", output="text")
def run(request):
    if not isinstance(request, dict):
        raise JobError("bad_input", 'expected {"start": "YYYY-MM-DD", "months": N}')
    try:
        start = isoparse(str(request.get("start"))).date()
    except ValueError as error:
        raise JobError("bad_input", f"start: {error}") from None
    months = request.get("months", 12)
    if not isinstance(months, int) or not 1 <= months <= MONTHS_MAX:
        raise JobError("bad_input", f"months: a whole number from 1 to {MONTHS_MAX}")
    amount = request.get("amount", 0)
    if not isinstance(amount, (int, float)):
        raise JobError("bad_input", "amount: a number")
    rows = []
    for n in range(months):
        due = start + relativedelta(months=n)
        rows.append([n + 1, due.isoformat(), due.strftime("%A"), amount])
    return tabulate(rows, headers=["#", "due", "weekday", "amount"]) + "\n"
