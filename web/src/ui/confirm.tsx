import type { ComponentChildren } from 'preact';
import { useRef } from 'preact/hooks';

/**
 * A button that asks before it acts, in a native modal <dialog> (focus
 * trapped, Escape cancels).
 */
export function ConfirmButton({
  label,
  question,
  confirm,
  onConfirm,
  danger = true,
  disabled,
}: {
  label: string;
  question: ComponentChildren;
  confirm: string;
  onConfirm: () => void;
  danger?: boolean;
  disabled?: boolean;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  return (
    <>
      <button type="button" class={danger ? 'danger small' : 'small'} disabled={disabled} onClick={() => ref.current?.showModal()}>
        {label}
      </button>
      <dialog ref={ref} aria-label={label}>
        <form method="dialog" class="stack">
          <p>{question}</p>
          <div class="row end">
            <button value="cancel" class="secondary">
              Cancel
            </button>
            <button
              value="ok"
              class={danger ? 'danger' : ''}
              onClick={(e) => {
                e.preventDefault();
                ref.current?.close();
                onConfirm();
              }}
            >
              {confirm}
            </button>
          </div>
        </form>
      </dialog>
    </>
  );
}
