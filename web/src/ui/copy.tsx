import { useState } from 'preact/hooks';

/** Copies text to the clipboard and says so. */
export function CopyButton({ text, label = 'Copy' }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <button
      type="button"
      class="secondary small"
      onClick={async () => {
        try {
          await navigator.clipboard.writeText(text);
        } catch {
          // Without clipboard permission, select the text for the user instead.
          const ta = document.createElement('textarea');
          ta.value = text;
          document.body.append(ta);
          ta.select();
          document.execCommand('copy');
          ta.remove();
        }
        setDone(true);
        setTimeout(() => setDone(false), 1500);
      }}
    >
      {done ? 'Copied' : label}
    </button>
  );
}

/** A block of code with its copy button. */
export function Snippet({ code, label }: { code: string; label: string }) {
  return (
    <figure class="snippet">
      <figcaption>
        <span>{label}</span> <CopyButton text={code} label={`Copy ${label}`} />
      </figcaption>
      <pre>
        <code>{code}</code>
      </pre>
    </figure>
  );
}
